"""Adapters: engines the kit's checks can be pointed at, ready made, and peers' views of ours.

    llama_cpp      llama.cpp through llama-cpp-python's low-level binding: a GGUF file, each
                   kit row its own sequence of one llama_context (llama_engine)
    transformers   any transformers causal LM, with a DynamicCache or a StaticCache (hf_engine)
    openai         any OpenAI-compatible server, by URL: the requests the API checks send
                   (minillm.testing.api), over the standard library's HTTP client
    grammars       a minillm tokenizer as the constrained-decoding peers read it (outlines-core's
                   Vocabulary, llguidance's LLTokenizer), for comparing masks

Each module imports its peer (llama_cpp, torch and transformers, outlines_core and llguidance)
only when an adapter is made, and says in one line how to install it when it is missing, so
that importing an adapter never fails and never loads a large library by itself.
docs/TESTING.md shows the engines' adapters at work.
"""
