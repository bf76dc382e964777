"""ECR: where an image goes, and whether a content tag is already there (then the build is skipped)."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.hooks.ecr import EcrHook

from raylift.errors import BuildError


class EcrImageHook(EcrHook):
    """The provider's ``EcrHook`` plus the two questions an image build asks."""

    def repository_uri(self, repository: str) -> str:
        """``<account>.dkr.ecr.<region>.amazonaws.com/<repository>``; BuildError if the repository is missing."""
        return self._describe_repository(repository)["repositoryUri"]

    def _describe_repository(self, repository: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        try:
            return self.conn.describe_repositories(repositoryNames=[repository])["repositories"][0]
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "RepositoryNotFoundException":
                raise BuildError(
                    f"ECR repository {repository!r} does not exist: create it (terraform) or set 'ecr_repository'."
                ) from None
            raise

    def image_tag_exists(self, repository: str, tag: str) -> bool:
        """True when ``repository:tag`` is already pushed."""
        from botocore.exceptions import ClientError

        try:
            reply = self.conn.describe_images(repositoryName=repository, imageIds=[{"imageTag": tag}])
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "ImageNotFoundException":
                return False
            if code == "RepositoryNotFoundException":
                raise BuildError(
                    f"ECR repository {repository!r} does not exist: create it (terraform) or set 'ecr_repository'."
                ) from None
            raise
        return bool(reply.get("imageDetails"))

    def retag(self, repository: str, source_tag: str, target_tag: str) -> bool:
        """Point ``target_tag`` at the image ``source_tag`` names (same manifest, no pull/push).

        Returns False when it already did. BuildError when ``source_tag`` is not in the repository.
        """
        from botocore.exceptions import ClientError

        reply = self.conn.batch_get_image(repositoryName=repository, imageIds=[{"imageTag": source_tag}])
        images = reply.get("images") or []
        if not images:
            raise BuildError(
                f"ECR {repository}:{source_tag} is missing, so {target_tag!r} cannot point at it: "
                "the build did not push its image (see the build logs)."
            )
        image = images[0]
        kwargs: dict[str, Any] = {
            "repositoryName": repository,
            "imageManifest": image["imageManifest"],
            "imageTag": target_tag,
        }
        if image.get("imageManifestMediaType"):
            kwargs["imageManifestMediaType"] = image["imageManifestMediaType"]
        try:
            self.conn.put_image(**kwargs)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ImageAlreadyExistsException":
                return False
            raise
        return True
