//! The builders behind `Sgd::with_params(...)` and friends: chained setters over an
//! optimizer's config, then `build()`.

/// Defines a builder type `$builder` that collects a parameter list and a `$config`, with one
/// setter per listed field, and builds a `$opt` through `$opt::new`.
macro_rules! builder {
    (
        $(#[$meta:meta])*
        $builder:ident builds $opt:ident from $config:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[must_use = "call build() to make the optimizer"]
        pub struct $builder {
            params: Vec<ember_autograd::Var>,
            config: $config,
        }

        impl $builder {
            /// A builder over `params` with the default settings.
            pub(crate) fn new(params: impl IntoIterator<Item = ember_autograd::Var>) -> Self {
                $builder { params: params.into_iter().collect(), config: $config::default() }
            }

            $(
                $(#[$fmeta])*
                pub fn $field(mut self, $field: $ty) -> Self {
                    self.config.$field = $field;
                    self
                }
            )*

            /// Makes the optimizer; fails, naming the setting, when a setting is out of range,
            /// and on an empty, duplicated or non-float parameter list.
            pub fn build(self) -> ember_tensor::Result<$opt> {
                $opt::new(self.params, self.config)
            }
        }
    };
}

pub(crate) use builder;
