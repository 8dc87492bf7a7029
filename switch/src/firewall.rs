//! The firewall phase: the generation's firewall put in force in one transaction, first, so an
//! nft refusal changes nothing. The same calls serve `mesh reconcile` (converge), `mesh status`
//! (check: what a converge would change) and adoption (the found firewall recorded, and loaded
//! back across the flip).
//!
//! Dry run: `mesh reconcile --dry-run` and `mesh status` print [`Activator::check_firewall`].
//! Crash point: `firewall-converged`, after the transaction.

use mesh_lib::model::Mode;
use mesh_lib::{Generation, NodeRecord};

use crate::ActivateError;
use crate::Activator;

impl Activator {
    /// Records the firewall found in force: its kind and a dump of it (into the store,
    /// durably), for a rollback after the flip. Refuses a kind no driver speaks.
    pub fn record_found_firewall(&self, record: &mut NodeRecord) -> Result<(), ActivateError> {
        if record.found.firewall.is_some() {
            return Ok(());
        }
        if let Some((kind, dump)) = self.firewall.detect()? {
            let hash = self.store.put_blob(dump.as_bytes(), true)?;
            record.found.firewall = Some(mesh_lib::record::FoundFirewall { kind, dump: hash });
        }
        Ok(())
    }

    /// Puts `generation`'s firewall in force: the guard; the base ruleset on a managed node; the
    /// openings through the found firewall on an adopted one.
    pub fn converge_firewall(
        &self,
        generation: &Generation,
    ) -> Result<mesh_reach::firewall::Converged, ActivateError> {
        self.firewall_against(generation, true)
    }

    /// What [`Activator::converge_firewall`] would change, changing nothing: the firewall's drift.
    pub fn check_firewall(
        &self,
        generation: &Generation,
    ) -> Result<mesh_reach::firewall::Converged, ActivateError> {
        self.firewall_against(generation, false)
    }

    fn firewall_against(
        &self,
        generation: &Generation,
        apply: bool,
    ) -> Result<mesh_reach::firewall::Converged, ActivateError> {
        let (remove_tables, empty_inputs) = self.found_firewall_goes(generation.mode)?;
        // On an adopted node, the found firewall the flip removed comes back with the
        // generation's openings in it, in the transaction that removes the base ruleset.
        let dump = self.found_firewall_dump()?;
        let daemon = dump.as_ref().and_then(|d| d.daemon);
        let found = match generation.mode {
            Mode::Adopted => dump,
            Mode::Managed => None,
        };
        // The openings go through every foreign base chain that stays in force: on an adopted
        // node the predecessor's; on a managed one what a container runtime keeps (a drop
        // there is as final as anywhere).
        let want = mesh_reach::firewall::Want {
            guard: &generation.firewall.guard,
            base: generation.firewall.base.as_ref(),
            settings: &generation.settings,
            openings: &generation.openings,
            remove_tables: &remove_tables,
            empty_inputs: &empty_inputs,
            restore: found.as_ref(),
            daemon,
        };
        Ok(if apply {
            self.firewall.converge(&want)?
        } else {
            self.firewall.check(&want)?
        })
    }

    /// What of the found firewall goes on a node of `mode`: on a managed node that was adopted,
    /// the tables of the dump recorded at adoption that hold a firewall (as (family, name)),
    /// and the families whose INPUT chain is the predecessor's in a table a container runtime
    /// shares. Nothing on an adopted node.
    #[allow(clippy::type_complexity)]
    fn found_firewall_goes(
        &self,
        mode: Mode,
    ) -> Result<(Vec<(String, String)>, Vec<String>), ActivateError> {
        if mode == Mode::Managed {
            if let Some(dump) = self.found_firewall_dump()? {
                return Ok((dump.firewall_tables(), dump.shared_inputs()));
            }
        }
        Ok((Vec::new(), Vec::new()))
    }

    /// The flip previewed: who reaches every port published on the node now, and who would
    /// after switching to `managed` (the flip's generation) — its base ruleset and guard in
    /// force, the found firewall gone as the flip removes it. `published` names the containers
    /// an engine says publish a port. Reads only.
    pub fn preview_flip(
        &self,
        managed: &Generation,
        published: Vec<mesh_lib::import::Published>,
    ) -> Result<mesh_reach::preview::Preview, ActivateError> {
        let goes = self.found_firewall_goes(Mode::Managed)?;
        self.preview_flip_removing(managed, published, goes)
    }

    /// [`Activator::preview_flip`] for a declaration checked before the node is adopted
    /// (`mesh import --check`): a node with no record yet is previewed as if adopted now, its
    /// firewall in force the one the flip removes. Reads only.
    pub fn preview_flip_as_found(
        &self,
        managed: &Generation,
        published: Vec<mesh_lib::import::Published>,
    ) -> Result<mesh_reach::preview::Preview, ActivateError> {
        if self.record()?.is_some() {
            return self.preview_flip(managed, published);
        }
        let goes = match self.firewall.detect()? {
            Some((_, text)) => {
                let dump = mesh_reach::firewall::Dump::parse(text.as_bytes())?;
                (dump.firewall_tables(), dump.shared_inputs())
            }
            None => (Vec::new(), Vec::new()),
        };
        self.preview_flip_removing(managed, published, goes)
    }

    /// The flip to `managed` previewed, the flip removing `(tables, families whose shared INPUT
    /// it empties)` of the found firewall.
    #[allow(clippy::type_complexity)]
    fn preview_flip_removing(
        &self,
        managed: &Generation,
        published: Vec<mesh_lib::import::Published>,
        (remove_tables, empty_inputs): (Vec<(String, String)>, Vec<String>),
    ) -> Result<mesh_reach::preview::Preview, ActivateError> {
        Ok(mesh_reach::preview::preview(
            &self.observed(published)?,
            &mesh_reach::preview::Flip {
                target: managed,
                remove_tables: &remove_tables,
                empty_inputs: &empty_inputs,
            },
        ))
    }

    /// What the preview and an import read on the node: the ruleset in force, the sockets, the
    /// addresses and routes; `published` names the containers an engine says publish a port.
    pub fn observed(
        &self,
        published: Vec<mesh_lib::import::Published>,
    ) -> Result<mesh_reach::preview::Observed, ActivateError> {
        let listing = self.firewall.listing()?;
        let netns = self.firewall.netns();
        let sockets = mesh_reach::sockets::bound(netns).map_err(|e| mesh_node::NodeError::Io {
            what: "reading the sockets of",
            path: std::path::PathBuf::from(netns.unwrap_or("this network namespace")),
            source: e.source,
        })?;
        Ok(mesh_reach::preview::Observed {
            ruleset: listing.ruleset,
            saved: listing.saved,
            legacy: listing.legacy,
            sockets,
            net: self.interfaces()?,
            published,
        })
    }

    /// The found firewall as recorded at adoption, if one was.
    fn found_firewall_dump(&self) -> Result<Option<mesh_reach::firewall::Dump>, ActivateError> {
        match self.record()?.and_then(|r| r.found.firewall) {
            Some(found) => Ok(Some(mesh_reach::firewall::Dump::parse(
                &self.store.blob(&found.dump)?,
            )?)),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use mesh_lib::model::Mode;
    use mesh_lib::model::{
        FirewallRules, NodeName, Opening, Port, PrivateNetwork, Protocol, Settings, Source,
        TrafficPath,
    };
    use mesh_lib::record::{record_path, FirewallKind, FoundFirewall};
    use std::collections::BTreeMap;

    use super::*;
    use mesh_reach::firewall::{Call, Dump, Recording};

    fn generation(mode: Mode) -> Generation {
        let settings = Settings {
            ports: [("pg".to_owned(), Port::new(15432).unwrap())].into(),
            private_network: PrivateNetwork {
                range: "10.77.0.0/24".parse().unwrap(),
                address: "10.77.0.1".parse().unwrap(),
                hub: false,
            },
        };
        let openings = vec![Opening {
            module: "pg".into(),
            setting: "pg".into(),
            port: Port::new(15432).unwrap(),
            protocol: Protocol::Tcp,
            paths: BTreeSet::from([TrafficPath::Forwarded]),
            from: Source::Anywhere,
        }];
        Generation {
            format: 1,
            node: NodeName::new("n1").unwrap(),
            mode,
            firewall: FirewallRules {
                guard: mesh_lib::firewall::guard_ruleset(&settings),
                base: (mode == Mode::Managed)
                    .then(|| mesh_lib::firewall::base_ruleset(&settings, &openings)),
            },
            settings,
            modules: BTreeMap::new(),
            files: BTreeMap::new(),
            containers: BTreeMap::new(),
            openings,
            units: BTreeMap::new(),
        }
    }

    /// What the flip removes is decided from the dump recorded at adoption: the predecessor's
    /// own table, never a container runtime's (whose shared INPUT chain is emptied instead);
    /// the openings go on through what stays, on the adopted and the managed node alike; and
    /// the adopted node's converge carries the found firewall, to load back what a flip took.
    #[test]
    fn converge_asks_for_the_predecessor_gone_and_the_runtime_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (state, root) = (dir.path().join("state"), dir.path().join("root"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let firewall = Arc::new(Recording::default());
        let node = Activator::open(&state, &root, None)
            .unwrap()
            .with_firewall(Box::new(firewall.clone()));
        let dump = Dump {
            tables: [
                ("inet pred".to_owned(), "table inet pred {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n}\n".to_owned()),
                ("ip filter".to_owned(), "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n\tchain DOCKER {\n\t}\n}\n".to_owned()),
                ("ip nat".to_owned(), "table ip nat {\n\tchain DOCKER {\n\t}\n}\n".to_owned()),
            ]
            .into(),
            ..Dump::default()
        };
        let mut record = NodeRecord::managed(NodeName::new("n1").unwrap());
        record.mode = Mode::Adopted;
        record.found.firewall = Some(FoundFirewall {
            kind: FirewallKind::Nftables,
            dump: node
                .store
                .put_blob(&serde_json::to_vec(&dump).unwrap(), true)
                .unwrap(),
        });
        std::fs::write(record_path(&state), serde_json::to_vec(&record).unwrap()).unwrap();

        node.converge_firewall(&generation(Mode::Adopted)).unwrap();
        node.converge_firewall(&generation(Mode::Managed)).unwrap();
        let opening = vec!["mesh: pg pg 15432/tcp from anywhere".to_owned()];
        assert_eq!(
            firewall.calls(),
            [
                // On the adopted node, the found firewall is offered to load back what a flip
                // removed (the kernel's firewall loads it only where the base ruleset is).
                Call::Converge {
                    base: false,
                    openings: opening.clone(),
                    remove_tables: vec![],
                    empty_inputs: vec![],
                    restore: vec!["inet pred".into(), "ip filter".into(), "ip nat".into()],
                },
                Call::Converge {
                    base: true,
                    openings: opening,
                    remove_tables: vec![("inet".into(), "pred".into())],
                    empty_inputs: vec!["ip".into()],
                    restore: vec![],
                },
            ]
        );
    }
}
