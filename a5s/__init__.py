"""a5s client-side helpers: what API clients and webhook receivers import."""
