"""searcher/integrations"""
