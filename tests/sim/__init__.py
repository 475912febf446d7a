"""Tests of sim."""
