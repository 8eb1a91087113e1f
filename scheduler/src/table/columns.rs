//! The table's column types: interned ids, bit rows over them, and label columns.

use std::collections::HashMap;

/// Interns strings (or keys) to dense ids.
#[derive(Debug, Clone)]
pub struct Interner<K: std::hash::Hash + Eq + Clone> {
    ids: HashMap<K, u32>,
    keys: Vec<K>,
}

// By hand: the derive would ask `K: Default`, which a key need not be.
impl<K: std::hash::Hash + Eq + Clone> Default for Interner<K> {
    fn default() -> Self {
        Interner {
            ids: HashMap::new(),
            keys: Vec::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Interner<K> {
    pub fn intern(&mut self, key: &K) -> u32 {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.keys.len() as u32;
        self.keys.push(key.clone());
        self.ids.insert(key.clone(), id);
        id
    }
    pub fn get(&self, key: &K) -> Option<u32> {
        self.ids.get(key).copied()
    }
    pub fn key(&self, id: u32) -> &K {
        &self.keys[id as usize]
    }
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// One bit row per node over interned ids; rows widen (by whole words) as ids are added.
#[derive(Debug, Default, Clone)]
pub struct BitRows {
    pub words: usize,
    pub data: Vec<u64>,
}

impl BitRows {
    pub(crate) fn widen(&mut self, rows: usize, ids: usize) {
        let need = ids.div_ceil(64).max(1);
        if need <= self.words {
            return;
        }
        let mut data = vec![0u64; rows * need];
        for r in 0..rows {
            for w in 0..self.words {
                data[r * need + w] = self.data[r * self.words + w];
            }
        }
        self.words = need;
        self.data = data;
    }
    pub(crate) fn push_row(&mut self) {
        if self.words == 0 {
            self.words = 1;
        }
        self.data.extend(std::iter::repeat_n(0, self.words));
    }
    pub(crate) fn swap_remove(&mut self, row: usize, rows: usize) {
        let w = self.words;
        let last = rows - 1;
        if row != last {
            for k in 0..w {
                self.data[row * w + k] = self.data[last * w + k];
            }
        }
        self.data.truncate(last * w);
    }
    pub fn row(&self, r: usize) -> &[u64] {
        &self.data[r * self.words..(r + 1) * self.words]
    }
    pub(crate) fn set(&mut self, r: usize, id: u32, on: bool) {
        let i = r * self.words + id as usize / 64;
        let bit = 1u64 << (id % 64);
        if on {
            self.data[i] |= bit;
        } else {
            self.data[i] &= !bit;
        }
    }
    pub(crate) fn clear_row(&mut self, r: usize) {
        let w = self.words;
        self.data[r * w..(r + 1) * w].fill(0);
    }
}

/// One label key: each node's value of it as a dense id (0 = the node lacks the key).
#[derive(Debug, Clone)]
pub struct LabelColumn {
    pub name: String,
    pub values: Interner<String>,
    pub col: Vec<u32>,
}

impl LabelColumn {
    /// The id of `value`, if any node ever had it.
    pub fn value_id(&self, value: &str) -> Option<u32> {
        self.values.get(&value.to_string()).map(|v| v + 1)
    }
    /// The string of value id `id` (≥ 1).
    pub fn value(&self, id: u32) -> &str {
        self.values.key(id - 1)
    }
    /// Number of domain ids, including the "absent" id 0.
    pub fn domains(&self) -> usize {
        self.values.len() + 1
    }
}
