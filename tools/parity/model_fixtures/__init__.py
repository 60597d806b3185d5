"""One module per architecture of ember-models; see tools/parity/models.py."""
