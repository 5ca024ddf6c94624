"""generator_adapters"""
