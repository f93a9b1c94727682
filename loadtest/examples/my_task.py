"""An example load-test task: copy it next to your service and adapt build() and check().

Use it with ``gpuplan loadtest run URL --task path/to/my_task.py:FeatureTask --task-arg dim=512``,
or ship it in your package and register it under the ``gpuplan.loadtest.tasks`` entry-point
group so that ``--task feature`` finds it::

    [project.entry-points."gpuplan.loadtest.tasks"]
    feature = "mypkg.loadtest_tasks:FeatureTask"
"""

from __future__ import annotations

import base64

from loadtest.plugins import Request, Response


class FeatureTask:
    """POST an image, expect a feature vector of ``dim`` floats back."""

    def __init__(self, dim: str = "512", path: str = "/v1/feature") -> None:
        self.dim = int(dim)
        self.path = path
        # A real task would cycle through a corpus of images; a few fixed bytes stand in here.
        self.images = [base64.b64encode(bytes([i]) * 64).decode() for i in range(16)]

    def build(self, i: int) -> Request:
        return Request.json({"image": self.images[i % len(self.images)]}, path=self.path)

    def check(self, response: Response) -> bool:
        if response.status != 200:
            return False
        try:
            feature = response.json().get("feature")
        except (ValueError, AttributeError):
            return False
        return isinstance(feature, list) and len(feature) == self.dim
