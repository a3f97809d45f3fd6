"""Transcript replay: converting recorded Claude Code sessions into hook events, and backfill."""
