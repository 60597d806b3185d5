//! `ember-nn`: modules, layers and losses (filled in by the training-stack issue).
