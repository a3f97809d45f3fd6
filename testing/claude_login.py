"""A Claude Code CLI logged in with a subscription, in a HOME of its own: for tests and benchmarks that run the
real CLI against a scripted Messages API (``ANTHROPIC_BASE_URL``) with no API key."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sessionmem.testing.model_cache import place_model_cache


def logged_in_home(home: Path) -> Path:
    """A HOME whose Claude Code is logged in with a subscription (an OAuth login, as `claude auth login` leaves it),
    with the embedder's int8 model in its cache as a worker leaves it (:func:`~.model_cache.place_model_cache`)."""
    place_model_cache(home)
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    credentials = home / ".claude" / ".credentials.json"
    credentials.write_text(json.dumps({"claudeAiOauth": {
        "accessToken": "sk-ant-oat01-scripted", "refreshToken": "sk-ant-ort01-scripted",
        "expiresAt": int((time.time() + 30 * 86400) * 1000), "scopes": ["user:inference", "user:profile"],
        "subscriptionType": "pro"}}))
    credentials.chmod(0o600)
    return home
