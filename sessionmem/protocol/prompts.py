"""What a user typed, from how a transcript records it. Standard library only.

Claude Code writes a slash command to the transcript as tags --
``<command-name>/review</command-name> <command-message>…</command-message>
<command-args>123</command-args>`` -- where the user typed ``/review 123``. Read as
text, the tags are words of their own: ``/exit`` became "command name exit message
args", five words that looked like a prompt worth ranking memory by.
"""

from __future__ import annotations

import re

_COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.DOTALL)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)


def typed_prompt(text: str) -> str:
    """A slash command's tags as the command line the user typed; any other text as it is."""
    if "<command-name>" not in text:
        return text
    name = _COMMAND_NAME.search(text)
    if name is None:
        return text
    args = _COMMAND_ARGS.search(text)
    return f"{name.group(1)} {args.group(1).strip() if args else ''}".strip()
