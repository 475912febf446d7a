"""Shared test fixtures: tiny model pairs, synthetic and sample traces."""
