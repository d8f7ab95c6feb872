"""Adapters to other libraries (each imports its library only when used): `hyla.integrations.transformers`."""
