"""raylift: take an LLM from a model hub to a benchmarked OpenAI-compatible endpoint on Ray Serve + vLLM."""

__version__ = "0.2.0"
