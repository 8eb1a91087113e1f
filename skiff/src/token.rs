//! `skiff token create`: a bootstrap token for a node joining the cluster, as `kubeadm token
//! create` makes one: `<id>.<secret>` (6 and 16 characters of `[a-z0-9]`) kept as the Secret
//! `kube-system/bootstrap-token-<id>`, valid for `--ttl`. A member started with
//! `--enable-bootstrap-token-auth` (as `skiff up` starts them) authenticates it as
//! `system:bootstrap:<id>` in `system:bootstrappers`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rand::Rng as _;
use skiff_proto::api::secret::BOOTSTRAP_TOKEN_TYPE;
use skiff_proto::api::{Object, ObjectMeta, Secret};

use crate::config::Endpoints;

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Make a bootstrap token and print it.
    Create(CreateArgs),
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// How long the token authenticates (`24h`, `30m`); 0: forever.
    #[arg(long, default_value = "24h", value_parser = skiff_proto::duration::parse)]
    ttl: Duration,
    /// Extra groups for the token's user, each under `system:bootstrappers:`.
    #[arg(long, value_delimiter = ',')]
    groups: Vec<String>,
    /// What the token is for.
    #[arg(long, default_value = "")]
    description: String,
    #[command(flatten)]
    endpoints: Endpoints,
}

/// `n` characters of `[a-z0-9]`.
fn random_part(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// The Secret of token `id.secret`, expiring after `ttl` (never when zero).
fn token_secret(id: &str, secret: &str, a: &CreateArgs) -> Secret {
    let mut data = vec![
        ("token-id", id.to_owned()),
        ("token-secret", secret.to_owned()),
        ("usage-bootstrap-authentication", "true".to_owned()),
    ];
    if !a.ttl.is_zero() {
        let at =
            chrono::Utc::now() + chrono::Duration::from_std(a.ttl).unwrap_or(chrono::Duration::MAX);
        data.push((
            "expiration",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ));
    }
    if !a.groups.is_empty() {
        data.push(("auth-extra-groups", a.groups.join(",")));
    }
    if !a.description.is_empty() {
        data.push(("description", a.description.clone()));
    }
    Secret {
        metadata: ObjectMeta {
            name: format!("bootstrap-token-{id}"),
            namespace: "kube-system".into(),
            ..ObjectMeta::default()
        },
        type_: BOOTSTRAP_TOKEN_TYPE.into(),
        data: data
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into_bytes()))
            .collect(),
        ..Secret::default()
    }
}

pub fn run(cmd: TokenCommand) -> Result<ExitCode> {
    let TokenCommand::Create(a) = cmd;
    if let Some(g) = a
        .groups
        .iter()
        .find(|g| !g.starts_with("system:bootstrappers:"))
    {
        bail!("--groups {g:?}: a bootstrap token's groups are under system:bootstrappers:");
    }
    let store = a.endpoints.resolve()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let token = rt.block_on(async {
        let api = store.connect()?;
        if api
            .get(skiff_proto::api::Kind::Namespace, "", "kube-system")
            .await?
            .is_none()
        {
            let ns = serde_json::from_value::<skiff_proto::api::Namespace>(
                serde_json::json!({"metadata": {"name": "kube-system"}}),
            )
            .expect("invariant: a namespace");
            match api.create(&Object::Namespace(ns)).await {
                Ok(_) => {}
                Err(e) if e.code() == Some(skiff_proto::client::Code::AlreadyExists) => {}
                Err(e) => return Err(anyhow::Error::from(e).context("creating kube-system")),
            }
        }
        let (id, secret) = (random_part(6), random_part(16));
        api.create(&Object::Secret(token_secret(&id, &secret, &a)))
            .await
            .context("storing the token's Secret")?;
        anyhow::Ok(format!("{id}.{secret}"))
    })?;
    println!("{token}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_in_the_bootstrap_format() {
        let (id, secret) = (random_part(6), random_part(16));
        let token = format!("{id}.{secret}");
        assert_eq!(
            skiff_apiserver::access::authn::bootstrap_token(&token),
            Some((id.as_str(), secret.as_str()))
        );
    }
}
