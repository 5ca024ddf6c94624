"""Data preparation: raw benchmark formats -> the FlashRAG-shaped questions + corpus every other flow reads."""
