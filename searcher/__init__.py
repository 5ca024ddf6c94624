"""The searcher: an agent that queries a retriever, selects documents and decides when to stop.

It knows nothing of generators, rewards or training; a trained searcher is usable with this package
and the shared ground below it (`s3core`) alone.
"""
