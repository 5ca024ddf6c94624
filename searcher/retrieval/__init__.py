"""searcher/retrieval"""
