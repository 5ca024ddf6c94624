"""searcher/policy"""
