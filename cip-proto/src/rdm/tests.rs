//! The spec's examples (sizes filled in) and round trips.

use proptest::prelude::*;

use super::*;

fn fixture(name: &str) -> &'static str {
    match name {
        "headers" => include_str!("fixtures/headers.rdm"),
        "view-attributes" => include_str!("fixtures/view-attributes.rdm"),
        "view-score" => include_str!("fixtures/view-score.rdm"),
        "gatherer-all" => include_str!("fixtures/gatherer-all.rdm"),
        "gatherer-since" => include_str!("fixtures/gatherer-since.rdm"),
        "gatherer-view" => include_str!("fixtures/gatherer-view.rdm"),
        "document" => include_str!("fixtures/document.soif"),
        "server" => include_str!("fixtures/server.rdm"),
        "schema" => include_str!("fixtures/schema.rdm"),
        "schema-request-all" => include_str!("fixtures/schema-request-all.rdm"),
        "schema-request-view" => include_str!("fixtures/schema-request-view.rdm"),
        "schema-request-view-imposed" => include_str!("fixtures/schema-request-view-imposed.rdm"),
        "taxonomy" => include_str!("fixtures/taxonomy.rdm"),
        "taxonomy-request-root" => include_str!("fixtures/taxonomy-request-root.rdm"),
        "taxonomy-request-anklebiter" => include_str!("fixtures/taxonomy-request-anklebiter.rdm"),
        "taxonomy-request-anklebiter-2" => {
            include_str!("fixtures/taxonomy-request-anklebiter-2.rdm")
        }
        other => panic!("no fixture {other}"),
    }
}

fn objects(name: &str) -> Vec<SoifObject> {
    parse_all(fixture(name).as_bytes().to_vec(), Limits::default()).unwrap()
}

#[test]
fn the_spec_headers() {
    let hs: Vec<Header> = objects("headers")
        .iter()
        .map(|o| Header::from_object(o).unwrap())
        .collect();
    assert_eq!(hs[0].rdm_type, RdmType::StatusRequest);
    assert_eq!(hs[0].version, "1.0");
    assert_eq!(hs[1].rdm_type, RdmType::RdRequest);
    assert_eq!(hs[1].query_language.as_deref(), Some("gatherer"));
    let csid = hs[1].csid.as_ref().unwrap();
    assert_eq!(
        (csid.host.as_str(), csid.port, csid.name.as_str()),
        ("www.netscape.com", Some(80), "techpubs")
    );
    assert_eq!(csid.to_string(), "x-catalog://www.netscape.com:80/techpubs");
    assert_eq!(hs[2].error_message.as_deref(), Some("0 results"));
    for h in &hs {
        assert_eq!(&Header::from_object(&h.to_object()).unwrap(), h);
    }
}

#[test]
fn types_are_case_insensitive_and_all_twelve_round_trip() {
    assert_eq!(RdmType::from_name("RD-Request"), Some(RdmType::RdRequest));
    assert_eq!(
        RdmType::from_name("TAXONOMY-DESCRIPTION-RESPONSE"),
        Some(RdmType::TaxonomyDescriptionResponse)
    );
    assert_eq!(
        RdmType::from_name("schema-request"),
        Some(RdmType::SchemaDescriptionRequest)
    );
    assert_eq!(RdmType::from_name("rd-gossip"), None);
    for t in RdmType::ALL {
        assert_eq!(RdmType::from_name(t.name()), Some(t));
    }
    assert_eq!(RdmType::RdRequestDeleted.reply(), Some(RdmType::RdResponse));
    assert_eq!(RdmType::RdResponse.reply(), Some(RdmType::StatusResponse));
    assert!(RdmType::RdRequestDeleted.is_request());
    assert!(!RdmType::StatusResponse.is_request());
    assert!(!RdmType::StatusRequest.needs_query_language());
}

#[test]
fn the_spec_views() {
    let q = Query::from_object(&objects("view-attributes")[0]).unwrap();
    assert_eq!(
        q.view.attributes.as_deref().unwrap(),
        ["URL", "Title", "Author", "Last-Modified"]
    );
    assert_eq!(q.view.hits, Some(10));
    assert_eq!(q.view.order, vec![("Title".into(), Direction::Ascending)]);
    let s = Query::from_object(&objects("view-score")[0]).unwrap();
    assert_eq!(
        s.view.order,
        vec![
            ("Score".into(), Direction::Descending),
            ("Title".into(), Direction::Ascending)
        ]
    );
    assert_eq!(Query::from_object(&s.to_object()).unwrap(), s);
}

#[test]
fn the_spec_gatherer_scopes() {
    let scope = |f: &str| {
        GathererScope::parse(&Query::from_object(&objects(f)[0]).unwrap().scope.unwrap()).unwrap()
    };
    assert_eq!(scope("gatherer-all"), GathererScope::All);
    assert_eq!(scope("gatherer-since"), GathererScope::Since(784_111_777));
    assert_eq!(scope("gatherer-view"), GathererScope::All);
    assert_eq!(
        GathererScope::Since(784_111_777).to_scope(),
        "since Sun, 06 Nov 1994 08:49:37 GMT"
    );
    assert!(GathererScope::parse("since yesterday").is_err());
    assert!(GathererScope::parse("some").is_err());
}

#[test]
fn the_spec_server_description() {
    let sd = ServerDescription::from_object(&objects("server")[0]).unwrap();
    assert_eq!(sd.url, "x-catalog://powell.mcom.com:80/wwwdvl");
    assert_eq!(sd.supported_types.len(), 5);
    assert_eq!(
        sd.supported_query_languages,
        ["gatherer", "sample-keyword-ql"]
    );
    assert_eq!(sd.samples.len(), 3);
    let sample = parse_all(sd.samples[0].clone(), Limits::default()).unwrap();
    assert_eq!(sample[0].url_str(), Some("http://powell.mcom.com/a.html"));
    assert_eq!(sd.expires.as_deref(), Some("Thu, 01 Jan 1997 00:00:00 GMT"));
    assert_eq!(ServerDescription::from_object(&sd.to_object()).unwrap(), sd);
}

#[test]
fn the_spec_schema() {
    let s = Schema::from_object(&objects("schema")[0]).unwrap();
    assert_eq!(s.entries.len(), 3);
    assert_eq!(s.maintainer.as_deref(), Some("dhardy@netscape.com"));
    assert_eq!(s.entries[1].soif_attribute, "Author");
    assert_eq!(s.entries[1].get("Index-Attribute"), Some("1"));
    assert_eq!(s.entries[2].get("data-type"), Some("blob"));
    assert_eq!(Schema::from_object(&s.to_object()).unwrap(), s);
    for (f, defined) in [
        ("schema-request-all", "SOIF-Attribute"),
        ("schema-request-view", "Default-View-Attribute"),
        ("schema-request-view-imposed", "Default-View-Attribute"),
    ] {
        let m = Message::parse(fixture(f).as_bytes().to_vec(), Limits::default()).unwrap();
        assert_eq!(m.header.rdm_type, RdmType::SchemaDescriptionRequest);
        assert_eq!(m.header.query_language.as_deref(), Some("schema-basic"));
        let Body::Query(q) = &m.body else {
            panic!("{f}: a query")
        };
        assert_eq!(
            SchemaScope::parse(q.scope.as_deref().unwrap())
                .unwrap()
                .defined,
            defined
        );
    }
}

#[test]
fn the_spec_taxonomy() {
    let t = Taxonomy::from_objects(&objects("taxonomy")).unwrap();
    assert_eq!(t.id, "Netscape Sample 1");
    assert_eq!(t.classifications.len(), 4);
    assert_eq!(Taxonomy::from_objects(&t.to_objects()).unwrap(), t);
    let ids = |scope: &str| -> Vec<String> {
        let s = TaxonomyScope::parse(scope).unwrap();
        t.subtree(&s.classification, s.depth)
            .unwrap()
            .iter()
            .map(|c| c.id.clone())
            .collect()
    };
    assert_eq!(ids("descendant ROOT").len(), 4);
    assert_eq!(ids("anklebiter ROOT"), ["Education/Training"]);
    assert_eq!(
        ids("children Education/Training:Internal Training Classes"),
        [
            "Education/Training:Internal Training Classes",
            "Education/Training:Internal Training Classes:Course Descriptions",
            "Education/Training:Internal Training Classes:Schedule"
        ]
    );
    assert_eq!(ids("descendant/2 ROOT").len(), 2);
    assert!(
        t.subtree("Nowhere", None).is_none(),
        "an unknown classification"
    );
    for f in [
        "taxonomy-request-root",
        "taxonomy-request-anklebiter",
        "taxonomy-request-anklebiter-2",
    ] {
        let m = Message::parse(fixture(f).as_bytes().to_vec(), Limits::default()).unwrap();
        let Body::Query(q) = &m.body else { panic!() };
        TaxonomyScope::parse(q.scope.as_deref().unwrap()).unwrap();
    }
    assert!(TaxonomyScope::parse("sideways ROOT").is_err());
    assert!(TaxonomyScope::parse("descendant/x ROOT").is_err());
    assert!(TaxonomyScope::parse("descendant").is_err());
}

#[test]
fn views_order_limit_and_project() {
    let mut rds: Vec<SoifObject> = ["b", "C", "a"]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut o = SoifObject::new("DOCUMENT", format!("http://x/{i}")).unwrap();
            o.push("Title", t.as_bytes().to_vec()).unwrap();
            o.push("Score", (i * 10).to_string()).unwrap();
            o.push("Author", "z").unwrap();
            o
        })
        .collect();
    let view = View::parse(Some("URL,Title"), Some("2"), Some("-Score")).unwrap();
    view.apply(&mut rds);
    let titles: Vec<&[u8]> = rds.iter().map(|o| &o.first("Title").unwrap()[..]).collect();
    assert_eq!(titles, [b"a".as_slice(), b"C"]);
    assert!(rds.iter().all(|o| o.attributes.len() == 1));
    let mut by_title = objects("document");
    View::parse(None, None, Some("Title"))
        .unwrap()
        .apply(&mut by_title);
    assert!(View::parse(None, Some("ten"), None).is_err());
}

#[test]
fn messages_parse_and_write() {
    let m = Message::new(
        Header {
            query_language: Some("gatherer".into()),
            csid: Some(Csid::parse("x-catalog://h:80/docs").unwrap()),
            ..Header::new(RdmType::RdRequest)
        },
        Body::Query(Query {
            scope: Some("all".into()),
            view: View::default(),
        }),
    );
    assert_eq!(Message::parse(m.write(), Limits::default()).unwrap(), m);
    let rds = Message::new(
        Header::new(RdmType::RdResponse),
        Body::Objects(objects("document")),
    );
    assert_eq!(Message::parse(rds.write(), Limits::default()).unwrap(), rds);
    let status = Message::new(
        Header {
            error_message: Some("unknown catalog".into()),
            ..Header::new(RdmType::StatusResponse)
        },
        Body::Html(status_html("Error", "no <such> catalog")),
    );
    let back = Message::parse(status.write(), Limits::default()).unwrap();
    assert_eq!(back, status);
    let Body::Html(h) = back.body else { panic!() };
    assert!(h.contains("no &lt;such&gt; catalog"), "{h}");
    // Errors.
    for (bad, want) in [
        (&b"@DOCUMENT { - \n}\n"[..], "starts with an @RDMHEADER"),
        (b"@RDMHEADER { -\nRDM-Version{3}:\t1.0\n}\n", "no RDM-Type"),
        (
            b"@RDMHEADER { -\nRDM-Version{3}:\t1.0\nRDM-Type{4}:\tgimm\n}\n",
            "unknown RDM-Type",
        ),
        (
            b"@RDMHEADER { -\nRDM-Version{3}:\t1.0\nRDM-Type{14}:\tstatus-request\nCatalog-Service-ID{6}:\thttp:/\n}\n",
            "catalog service id",
        ),
        (b"", "starts with an @RDMHEADER"),
    ] {
        let e = Message::parse(bad.to_vec(), Limits::default()).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
    let two = format!(
        "{}{}{}",
        fixture("headers").split("\n\n").nth(1).unwrap(),
        fixture("gatherer-all"),
        fixture("gatherer-all")
    );
    assert!(Message::parse(two.into_bytes(), Limits::default()).is_err());
}

#[test]
fn csids() {
    assert_eq!(
        Csid::parse("X-CATALOG://host/name").unwrap(),
        Csid {
            host: "host".into(),
            port: None,
            name: "name".into()
        }
    );
    for bad in [
        "x-catalog://",
        "x-catalog://h:x/n",
        "http://h/n",
        "x-catalog://h/",
        "x",
    ] {
        assert!(Csid::parse(bad).is_err(), "{bad}");
    }
}

proptest! {
    #[test]
    fn queries_round_trip(
        scope in proptest::option::of("[a-z ]{1,20}"),
        attrs in proptest::option::of(proptest::collection::vec("[A-Za-z][A-Za-z-]{0,10}", 1..4)),
        hits in proptest::option::of(0usize..1000),
        order in proptest::collection::vec(("[A-Za-z][A-Za-z]{0,8}", any::<bool>()), 0..3),
    ) {
        let q = Query {
            scope: scope.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()),
            view: View {
                attributes: attrs,
                hits,
                order: order
                    .into_iter()
                    .map(|(k, d)| (k, if d { Direction::Ascending } else { Direction::Descending }))
                    .collect(),
            },
        };
        let m = Message::new(
            Header { query_language: Some("gatherer".into()), ..Header::new(RdmType::RdRequest) },
            Body::Query(q),
        );
        prop_assert_eq!(Message::parse(m.write(), Limits::default()).unwrap(), m);
    }

    #[test]
    fn noise_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Message::parse(bytes, Limits::default());
    }
}
