//! `ember-data`: datasets and data loaders (filled in by the training-stack issue).
