"""Real stacks the tests and the benchmarks both drive: a local raylift stack (Airflow + Ray + vLLM on 127.0.0.1),
a bounded background client, a moto server, the stub OpenAI server. They live under tests/ and bench/ imports them
(bench/ measures with the suite's own harness; nothing under tests/ imports bench/)."""
