//! What a container image's tag names at its registry now: the manifest digest the registry
//! answers for `REPOSITORY:TAG` (a `HEAD` of the manifest, every manifest and index type
//! accepted, as `docker pull` asks), so `mesh images lock` pins what a pull of the tag would
//! pin — an index's digest for a multi-arch tag. Nothing is fetched but the answer's headers
//! (the manifest itself when a registry gives no digest header, its bytes then hashed).
//!
//! The credentials are the docker config's for the image's registry, found as `mesh push`
//! finds them ([`crate::credentials`]).

use std::time::Duration;

use mesh_lib::image::{ImageDigest, ImageRef};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::Options;

/// Why a tag could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image {image}: {why}")]
pub struct ResolveError {
    /// The reference as declared.
    pub image: String,
    /// What went wrong, in words.
    pub why: String,
    /// Whether another try as it is cannot help: the registry has no such tag, or denies the
    /// credentials; otherwise it did not answer or failed.
    pub refused: bool,
}

/// The digest each of `images` (named by a tag, or by a repository alone: `latest`) names at
/// its registry now, in their order.
pub fn resolve(images: &[ImageRef], options: &Options) -> Vec<Result<ImageDigest, ResolveError>> {
    if images.is_empty() {
        return Vec::new();
    }
    let client = crate::client::oci_client(options);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            return images
                .iter()
                .map(|i| {
                    Err(ResolveError {
                        image: i.to_string(),
                        why: format!("no runtime to ask the registry in: {e}"),
                        refused: false,
                    })
                })
                .collect()
        }
    };
    images
        .iter()
        .map(|image| runtime.block_on(resolve_one(&client, image, options.timeout)))
        .collect()
}

async fn resolve_one(
    client: &Client,
    image: &ImageRef,
    timeout: Duration,
) -> Result<ImageDigest, ResolveError> {
    let fail = |why: String, refused: bool| ResolveError {
        image: image.to_string(),
        why,
        refused,
    };
    let by_tag = image
        .by_tag()
        .unwrap_or_else(|| format!("{}:latest", image.repository()));
    let reference: Reference = by_tag.parse().map_err(|e| {
        fail(
            format!("not a reference the registry client reads: {e}"),
            true,
        )
    })?;
    let lookup = crate::credentials::docker_login(image.credentials_host());
    let auth = match &lookup.login {
        Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
        None => RegistryAuth::Anonymous,
    };
    let registry = image.registry();
    let asked = tokio::time::timeout(timeout * 2, client.fetch_manifest_digest(&reference, &auth))
        .await
        .map_err(|_| {
            fail(
                format!(
                    "the registry {registry} did not answer in {} s",
                    timeout.as_secs() * 2
                ),
                false,
            )
        })?;
    let digest = match asked {
        Ok(d) => d,
        Err(e) => {
            let why = mesh_lib::text::chain(&e);
            let lower = why.to_ascii_lowercase();
            let no_tag = matches!(
                e,
                OciDistributionError::ImageManifestNotFoundError(_)
                    | OciDistributionError::ServerError { code: 404, .. }
            ) || lower.contains("manifest unknown")
                || lower.contains("name unknown");
            if no_tag {
                return Err(fail(
                    format!("the registry {registry} has no tag {by_tag}: {why}"),
                    true,
                ));
            }
            if crate::client::refuses_credentials(&why) {
                return Err(fail(
                    crate::Denied::new(registry, &lookup, why).to_string(),
                    true,
                ));
            }
            return Err(fail(
                format!("the registry {registry} did not answer: {why}"),
                false,
            ));
        }
    };
    ImageDigest::try_from(digest.as_str()).map_err(|e| {
        fail(
            format!("the registry {registry} answered a digest the mesh does not read: {e}"),
            false,
        )
    })
}
