"""Bearer tokens for the tests of `memory mcp --http`: an issuer's key pair made here, its
JWKS file, and JWTs minted with it (or made wrong on purpose). Not a test module."""

from __future__ import annotations

import base64
import json
import pathlib
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://issuer.example.test/"
AUDIENCE = "memory-mcp"
KEY_ID = "test-key-1"


class Issuer:
    """An identity provider of the tests' own: an RSA key pair, its JWKS written to a
    file, and tokens it signs."""

    def __init__(self, folder: pathlib.Path, key_id: str = KEY_ID) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.key_id = key_id
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = folder / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": [{**public, "kid": key_id, "alg": "RS256",
                                                   "use": "sig"}]}))

    def token(self, sub: object = "alice", *, audience: str = AUDIENCE, issuer: str = ISSUER,
              lifetime: float = 600, named: bool = True, **claims: Any) -> str:
        """A JWT of this issuer; `named` False leaves the key id out of its header."""
        now = int(time.time())
        payload = {"iss": issuer, "aud": audience, "sub": sub, "iat": now,
                   "exp": now + int(lifetime), **claims}
        return jwt.encode(payload, self.key, algorithm="RS256",
                          headers={"kid": self.key_id} if named else None)


def unsigned(sub: str = "alice") -> str:
    """A token with `alg: none`: claims anyone could write."""
    now = int(time.time())
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return (f"{part({'alg': 'none', 'typ': 'JWT', 'kid': KEY_ID})}."
            f"{part({'iss': ISSUER, 'aud': AUDIENCE, 'sub': sub, 'exp': now + 600})}.")


def hmac_signed(secret: str, sub: str = "alice") -> str:
    """A token signed with HS256: a shared secret, which no JWKS should serve."""
    now = int(time.time())
    return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now + 600}, secret,
                      algorithm="HS256", headers={"kid": KEY_ID})
