"""Workflows from conversations: turn historical dialogues into a PDL library.

- ``transcripts``: the documented transcript format (one dialogue per JSONL line) and its loader.
- ``star`` / ``abcd``: dataset dialogues read as transcripts.
- ``elements``: procedural elements of a conversation and Proc-Sim selection (embedding centroid).
- ``mining``: the offline, deterministic extractor (directly-follows graph -> PDL workflow).
- ``qa_cot``: LLM extraction (QA-CoT and the paper's baselines) over a chat-model callable.
- ``extract``: the whole pipeline, transcripts -> library tree on disk.

This package imports nothing outside ``workflows``: embedders and chat models are passed in.
"""
