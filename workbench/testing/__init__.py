"""Test and benchmark helpers that run real components (a real HTTP mock on 127.0.0.1)."""
