"""Benchmark spec YAML files (package data; this file makes the folder a package so they ship in wheels)."""
