"""Text any control plane can store. PostgreSQL's text and jsonb hold no NUL character, and UTF-8
encodes no lone surrogate (``\\ud800``-``\\udfff`` unpaired). A task's output may hold either, so
its log tail is cleaned, not refused: each such character becomes U+FFFD, as bytes that are not
UTF-8 already do when the output is decoded. The daemon cleans what it sends and the control plane
what it stores, with this one rule."""

import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    return UNSTORABLE.sub(REPLACEMENT, text)
