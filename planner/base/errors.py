"""The one error type the planner raises for bad input.

Notes
-----
Every message names the field it is about (``requests.face_image_flow: machineNum 3 does not
divide 8 cards``) so the CLI can print one line and the operator can put it in ``status.message``
without a traceback. Anything else escaping the planner is a bug, not bad input.
"""


class InvalidInput(ValueError):
    """Input that can never produce a plan, with the field that is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message
