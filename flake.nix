{
  description = "mesh: a declarative configuration compiler with generation rollback, built to adopt machines that are in use";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    flake-utils.url = "github:numtide/flake-utils";
  };

  outputs = { self, nixpkgs, flake-utils }:
    flake-utils.lib.eachDefaultSystem (system:
      let
        pkgs = nixpkgs.legacyPackages.${system};
        mesh = pkgs.rustPlatform.buildRustPackage {
          pname = "mesh";
          version = "0.1.0";
          src = ./.;
          cargoLock.lockFile = ./Cargo.lock;
          # The suite needs root, network namespaces and a Docker engine: the check below runs
          # the parts that need none of them.
          doCheck = false;
          nativeBuildInputs = [ pkgs.installShellFiles ];
          # Completions for bash, zsh and fish and a man page per command, made by the binary
          # just built from the command line's own definition (their text is `--help`'s), and
          # the mesh's Nickel library in share/mesh (for NICKEL_IMPORT_PATH). The commands read
          # no state directory, so the build's sandbox is no trouble.
          postInstall = pkgs.lib.optionalString (pkgs.stdenv.buildPlatform.canExecute pkgs.stdenv.hostPlatform) ''
            installShellCompletion --cmd mesh \
              --bash <($out/bin/mesh completions bash) \
              --zsh <($out/bin/mesh completions zsh) \
              --fish <($out/bin/mesh completions fish)
            $out/bin/mesh man --write man
            installManPage man/*.1
            $out/bin/mesh lib --write $out/share/mesh
          '';
          # The nftables driver opens libnftables (libnftables.so.1) at run time; without it on
          # the search path it falls back to the `nft` command.
          postFixup = ''
            patchelf --add-rpath ${pkgs.lib.getLib pkgs.nftables}/lib $out/bin/mesh
          '';
          meta.mainProgram = "mesh";
        };
        # The manual (docs/): the guide and the reference, as scripts/test.sh builds it.
        docs = pkgs.stdenvNoCC.mkDerivation {
          pname = "mesh-docs";
          version = "0.1.0";
          src = ./docs;
          nativeBuildInputs = [ pkgs.mdbook ];
          buildPhase = ''
            runHook preBuild
            mdbook build --dest-dir "$out" .
            runHook postBuild
          '';
          dontInstall = true;
        };
      in
      {
        packages.default = mesh;
        packages.docs = docs;

        devShells.default = pkgs.mkShell {
          inputsFrom = [ mesh ];
          packages = with pkgs; [ cargo rustc clippy rustfmt nftables iproute2 docker busybox ];
        };

        checks.tests = mesh.overrideAttrs (old: {
          pname = "mesh-tests";
          doCheck = true;
          nativeCheckInputs = [ pkgs.nftables pkgs.iproute2 ];
          checkPhase = ''
            runHook preCheck
            # The source here is no checkout: the examples' fleet file (examples/fleet.ncl)
            # makes their folder one fleet's tree all the same.
            cargo test --workspace --locked --offline
            runHook postCheck
          '';
        });
      });
}
