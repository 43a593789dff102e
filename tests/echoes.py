"""The forms in which a failing model or service echoes its input in an error message: a
text as an HTTP body, a tokenizer or a log line writes it. The tests of what a failure's
message may give (test_meaning, test_rerank) raise each, and the store must give none."""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import quopri
import re
import unicodedata
import urllib.parse
from collections.abc import Callable


def _stripped(text: str) -> str:
    """As a BERT-style normalizer leaves it: lower case, accents (combining marks) gone."""
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")


def _word_pieces(text: str) -> str:
    """A WordPiece token list's repr: each word in pieces of at most 3 characters."""
    pieces = []
    for word in re.findall(r"\w+|[^\w\s]", _stripped(text)):
        pieces += [("##" if at else "") + word[at : at + 3] for at in range(0, len(word), 3)]
    return repr(pieces)


def _octal(text: str) -> str:
    return "".join(f"\\{byte:03o}" for byte in text.encode())


def _latin1_ascii(text: str) -> str:
    """Python's ascii() of the text where Latin-1 holds it, else of its UTF-8 as Latin-1."""
    try:
        return ascii(text.encode("latin-1").decode("latin-1"))
    except UnicodeEncodeError:
        return ascii(text.encode().decode("latin-1"))


def _cp1252(text: str) -> str:
    return text.encode().decode("cp1252", "replace")


ECHOES: dict[str, Callable[[str], str]] = {
    "plain": lambda text: text,
    "json": lambda text: json.dumps({"input": [text]}),
    "repr": repr,
    "ascii": ascii,
    "bytes": lambda text: repr(text.encode()),
    "url": urllib.parse.quote,
    "base64": lambda text: base64.b64encode(text.encode()).decode(),
    "base64url, no padding": lambda text: base64.urlsafe_b64encode(
        text.encode()).decode().rstrip("="),
    "base32": lambda text: base64.b32encode(text.encode()).decode(),
    "hex": lambda text: text.encode().hex(),
    "hex, spaced": lambda text: binascii.hexlify(text.encode(), " ").decode(),
    "decimal character references": lambda text: "".join(f"&#{ord(c)};" for c in text),
    "hex character references": lambda text: "".join(f"&#x{ord(c):x};" for c in text),
    "octal": _octal,
    "quoted-printable": lambda text: quopri.encodestring(text.encode()).decode(),
    "Latin-1 ascii()": _latin1_ascii,
    "UTF-8 read as Latin-1": lambda text: text.encode().decode("latin-1"),
    "UTF-8 read as cp1252": _cp1252,
    "accents stripped": _stripped,
    "word pieces": _word_pieces,
    "rot13": lambda text: codecs.encode(text, "rot13"),
    "reversed": lambda text: text[::-1],
    "code points": lambda text: " ".join(str(ord(c)) for c in text),
}

# Texts of several scripts and shapes: a secret, accents Latin-1 holds, a script it does
# not, one a normalizer changes, one of ASCII letters alone.
TEXTS = [
    "Alice's PIN is 4827",
    "Åsa Ødegård bor i Tromsø",
    "Адрес: улица Ленина, 5",
    "東京の渋谷に住んでいる",
    "Zoë prefers crème brûlée",
    "mysecretpassword",
]

# Lines a model's client or service writes when it fails, quoting nothing: given whole.
PLAIN_FAILURES = [
    "HTTP 429 Too Many Requests",
    "[Errno 111] Connection refused",
    "CUDA out of memory",
    "HTTP 503: Service Unavailable",
    "Request timed out",
]
