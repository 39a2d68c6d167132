"""api-v1's serializers, one module per area, on the strict fields of ``fields`` (a JSON value
of the wrong type is refused, never coerced)."""
