//! `Secret` (v1): small named pieces of data (`data`, base64 in JSON), as Kubernetes keeps
//! them. `stringData` is write-only: its entries are merged into `data` when the Secret is
//! written (defaulting), and never stored or returned. Bootstrap tokens for joining nodes
//! are Secrets of type `bootstrap.kubernetes.io/token` in `kube-system`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, Unmodelled};
#[cfg(test)]
use super::testing::small_map;

/// The type of a Secret that names none.
pub const OPAQUE: &str = "Opaque";
/// The type of a bootstrap token's Secret.
pub const BOOTSTRAP_TOKEN_TYPE: &str = "bootstrap.kubernetes.io/token";

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Secret\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The values, base64 in JSON.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "base64_values"
    )]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub data: BTreeMap<String, Vec<u8>>,
    /// Plain-text values merged into `data` when written; never stored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(value = "BTreeMap::new()"))]
    pub string_data: BTreeMap<String, String>,
    /// `Opaque` when defaulted.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl Secret {
    /// The value of `key` as text, when it is there and UTF-8.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.data.get(key).and_then(|v| std::str::from_utf8(v).ok())
    }
}

/// `data`'s values as Kubernetes writes them: standard base64.
mod base64_values {
    use std::collections::BTreeMap;

    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        values: &BTreeMap<String, Vec<u8>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(values.iter().map(|(k, v)| (k, STANDARD.encode(v))))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Vec<u8>>, D::Error> {
        let encoded = BTreeMap::<String, Option<String>>::deserialize(d)?;
        encoded
            .into_iter()
            .map(|(k, v)| {
                let v = v.unwrap_or_default();
                STANDARD
                    .decode(v.as_bytes())
                    .map(|bytes| (k.clone(), bytes))
                    .map_err(|e| {
                        serde::de::Error::custom(format!("data[{k}]: illegal base64 data: {e}"))
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_base64_in_json() {
        let s: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "default"},
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"user": "alice"},
            "type": "Opaque"
        }))
        .expect("secret");
        assert_eq!(s.text("password"), Some("hunter2"));
        assert_eq!(s.string_data["user"], "alice");
        let back = serde_json::to_value(&s).expect("json");
        assert_eq!(back["data"]["password"], "aHVudGVyMg==");
        let bad = serde_json::from_value::<Secret>(serde_json::json!({"data": {"k": "%%%"}}))
            .expect_err("not base64");
        assert!(
            bad.to_string().contains("data[k]: illegal base64 data"),
            "{bad}"
        );
    }
}
