"""Tests of theory."""
