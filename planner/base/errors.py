"""The one error type the planner raises for bad input.

Notes
-----
Every message names the field it is about (``requests.face_image_flow: machineNum 3 does not
divide 8 cards``) so the CLI can print one line and the operator can put it in ``status.message``
without a traceback. Anything else escaping the planner is a bug, not bad input.
"""


def printable(text: str) -> str:
    """``text`` on one line: what does not print (a line break, a tab, a control character)
    escaped as Python writes it (``\\n``). A key of the input is part of a field's path, and a
    key may be any string: one that held a line break split the CLI's one-line message."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class InvalidInput(ValueError):
    """Input that can never produce a plan, with the field that is wrong (``field`` and
    ``message`` as given; the error's text is one printable line)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(printable(f"{field}: {message}" if field else message))
        self.field = field
        self.message = message
