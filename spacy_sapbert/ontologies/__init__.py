"""Ontology readers: one module per format, each yielding ``ConceptRecord``s."""
