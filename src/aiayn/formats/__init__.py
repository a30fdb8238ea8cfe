"""Other tools' files read into aiayn's model, below ``inference/`` so that loading for use reads them directly: a
Hugging Face folder (``hf_folder``: config, weights tensor by tensor, generation defaults), each family's config and
tensor table (``marian``, ``t5``, ``gpt2``, ``bert``, ``llama`` with Qwen and Mistral, ``gemma``, ``phi3``, ``moe``),
and llama.cpp's GGUF file (``gguf``, its blocks ``gguf_rows``, its tokenizer ``gguf_vocab``). Writing them back, and
importing into a checkpoint folder, is ``aiayn.interop``'s.
"""
