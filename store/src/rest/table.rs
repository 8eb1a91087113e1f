//! See the module table in [`super`].
