"""JSON schemas of the wire protocol, generated from `streamer/protocol.py`, and their doc section.

`python -m streamer.protocol --markdown` prints the generated section of docs/protocol.md;
`--write docs/protocol.md` replaces it in place (between the BEGIN/END markers), and
`streamer protocol-schema` prints all schemas as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel

from streamer.protocol import CLIENT_MESSAGES, PROTOCOL_VERSION, SERVER_EVENTS

BEGIN = "<!-- BEGIN GENERATED SCHEMAS (python -m streamer.protocol --write docs/protocol.md) -->"
END = "<!-- END GENERATED SCHEMAS -->"


def _name(model: type[BaseModel]) -> str:
    """The `type` value a message carries; "ack" for the control acks, whose type varies."""
    default = model.model_fields["type"].default
    return default if isinstance(default, str) else "ack"


def schemas() -> dict:
    """`{"protocol": 1, "client": {type: schema}, "server": {type: schema}}`."""

    def one(model: type[BaseModel]) -> dict:
        schema = model.model_json_schema()
        schema["title"] = model.__name__
        return schema

    client = {_name(m): one(m) for m in CLIENT_MESSAGES}
    server = {_name(m): one(m) for m in SERVER_EVENTS}
    return {"protocol": PROTOCOL_VERSION, "client": client, "server": server}


def markdown() -> str:
    """The generated section: one heading and schema block per message."""
    all_schemas = schemas()
    out = [BEGIN, ""]
    for side, title in (("client", "Client -> server messages"), ("server", "Server -> client events")):
        out += [f"### {title}", ""]
        for key, schema in all_schemas[side].items():
            doc = (schema.get("description") or "").strip().splitlines()
            heading = f"`{key}`" if key != "ack" else "control acks (`prompt`, `action`, ...)"
            out += [f"#### {heading}", ""]
            if doc:
                out += [" ".join(line.strip() for line in doc), ""]
            out += ["```json", json.dumps(schema, indent=2, sort_keys=True), "```", ""]
    out.append(END)
    return "\n".join(out) + "\n"


def write(path: Path) -> bool:
    """Replace the generated section of `path`; returns True if the file changed."""
    text = path.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END) + 1
    new = text[:start] + markdown() + text[end:]
    if new != text:
        path.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streamer.protocol", description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="print the docs/protocol.md section")
    parser.add_argument("--write", metavar="FILE", help="update the generated section of FILE")
    args = parser.parse_args(argv)
    if args.write:
        changed = write(Path(args.write))
        print(f"{args.write}: {'updated' if changed else 'up to date'}")
    elif args.markdown:
        sys.stdout.write(markdown())
    else:
        print(json.dumps(schemas(), indent=2))
    return 0
