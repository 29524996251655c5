"""The adapter's labels and names: how it finds what it made, and never touches the rest."""

from __future__ import annotations

import attrs

__all__ = ["Naming"]


@attrs.frozen
class Naming:
    """Label keys and object names under one owner and label prefix.

    Every container and network the adapter makes carries ``<prefix>.owner`` = ``owner``;
    it lists, changes and removes only objects with that label.
    """

    owner: str
    prefix: str = "io.pando"

    @property
    def owner_key(self) -> str:
        """The owner label's key."""
        return f"{self.prefix}.owner"

    @property
    def bundle_key(self) -> str:
        """The label naming the bundle."""
        return f"{self.prefix}.bundle"

    @property
    def workload_key(self) -> str:
        """The label naming the workload (containers only)."""
        return f"{self.prefix}.workload"

    @property
    def spec_key(self) -> str:
        """The label holding the hash of the container's whole create request."""
        return f"{self.prefix}.spec"

    @property
    def epoch_key(self) -> str:
        """The label holding the epoch a container was written under (host replicas only)."""
        return f"{self.prefix}.epoch"

    @property
    def owner_filter(self) -> str:
        """The ``label`` filter that selects this owner's objects."""
        return f"{self.owner_key}={self.owner}"

    def container_name(self, bundle_id: str, workload: str) -> str:
        """The container's name (ids and workload names hold no dots: no clashes)."""
        return f"{self.owner}.{bundle_id}.{workload}"

    def network_name(self, bundle_id: str) -> str:
        """The bundle network's name."""
        return f"{self.owner}.{bundle_id}"

    def volume_name(self, volume_id: str) -> str:
        """A named volume's name (volume ids hold no dots)."""
        return f"{self.owner}.{volume_id}"

    def bundle_labels(self, bundle_id: str) -> dict[str, str]:
        """Labels of every object of a bundle."""
        return {self.owner_key: self.owner, self.bundle_key: bundle_id}
