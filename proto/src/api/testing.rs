//! Strategies that keep generated objects small enough to round-trip quickly.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

/// A label map from pairs.
pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(crate) fn small_vec<T: Arbitrary>() -> impl Strategy<Value = Vec<T>> {
    vec(any::<T>(), 0..3)
}

pub(crate) fn small_map<V: Arbitrary>() -> impl Strategy<Value = BTreeMap<String, V>> {
    btree_map(any::<String>(), any::<V>(), 0..3)
}

impl Arbitrary for crate::quantity::Quantity {
    type Parameters = ();
    type Strategy = BoxedStrategy<Self>;
    fn arbitrary_with(_: ()) -> Self::Strategy {
        prop_oneof![
            (0i64..100_000).prop_map(crate::quantity::Quantity::from_milli),
            (0i64..1 << 40).prop_map(crate::quantity::Quantity::from_bytes),
        ]
        .boxed()
    }
}
