"""Tests of the command line (toolkit/cli.py, commands/, demo, help): one command shape, the demo."""
