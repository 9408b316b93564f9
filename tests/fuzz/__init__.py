"""Hypothesis fuzzers: the bookie's wire decoding against a real process, and storage replay."""
