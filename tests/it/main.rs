//! The mesh's integration tests: one binary, a module per capability. Each test gets its own
//! state directory and works only in folders and namespaces it creates.

mod build;
mod cache;
mod containers;
mod crash;
mod deploy_edges;
mod faults;
mod firewall_adopted;
mod firewall_drivers;
mod firewall_rules;
mod firewall_runtime;
mod fleet;
mod flip_preview;
mod genesis;
mod hardening;
mod held;
mod import;
mod incremental;
mod netlab;
mod node_fixture;
mod pull;
mod registry_lab;
mod rejections;
mod review;
mod scale;
mod secrets;
mod services;
mod serving;
mod setup;
mod signers;
mod sshlab;
mod support;
mod switch;
mod systemd_node;
mod trust;
mod units_edges;
