"""The program corpus (see corpus.py) and hypothesis strategies for instructions."""
