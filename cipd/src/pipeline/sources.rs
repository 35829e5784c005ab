//! Which source reads a collection: the SOIF files, the bundled sample, a Hina-Di file or URL
//! ([`crate::pipeline::hinadi_feed`]), or an RDM catalog ([`crate::pipeline::rdm_pull`]).

use crate::model::config::{CollectionConfig, SourceConfig};
use crate::pipeline::hinadi_feed::HinaDiSource;
use crate::pipeline::rdm_pull::RdmSource;
use crate::store::collection::{
    CollectionSource, FileSet, SampleSource, SoifSource, SourceContext,
};

/// Builds the source a collection's configuration describes.
pub fn source_for(config: &CollectionConfig, ctx: &SourceContext) -> Box<dyn CollectionSource> {
    match &config.source {
        SourceConfig::Soif {
            path,
            recursive,
            extensions,
        } => Box::new(SoifSource {
            files: FileSet {
                path: path.clone(),
                recursive: *recursive,
                extensions: extensions.clone(),
            },
            limits: ctx.soif,
        }),
        SourceConfig::HinaDi {
            location,
            charset,
            untrusted,
        } => Box::new(HinaDiSource::new(
            &config.name,
            location,
            charset,
            *untrusted,
            ctx,
        )),
        SourceConfig::Rdm { url, .. } => Box::new(RdmSource::new(
            &config.name,
            url.as_deref(),
            &ctx.data_dir,
            ctx.soif,
        )),
        SourceConfig::Sample => Box::new(SampleSource),
    }
}
