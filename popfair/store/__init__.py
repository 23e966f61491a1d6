"""What popfair keeps between runs: content-addressed blob stores (`blobs`: documents, nuisances,
embeddings), the response cache of paid answers (`responses`), claims so no answer is paid twice
(`claims`, `owners`), work split between processes through claims (`shared_work`), and the cache
CLI (`python -m popfair.store copy SRC DST`)."""
