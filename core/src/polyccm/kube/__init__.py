"""Talking to the Kubernetes API: a JSON client, informers with light caches, and helpers."""
