"""Image formats: ``jpeg`` (headers, checks, decoder settings)."""
