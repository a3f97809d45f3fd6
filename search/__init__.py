"""Search: words, meaning, both; what the injected context recalls."""
