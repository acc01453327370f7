"""The lab's Hugging Face Hub-compatible server (see README.md)."""
