"""The embedded OpenAI-compatible model server (torch + transformers), and starting it on demand."""
