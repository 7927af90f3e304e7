// Package images builds callerauth's container images, as make images
// does: one OCI image per binary, FROM scratch — the static binary
// (CGO_ENABLED=0, -trimpath) at /usr/local/bin/<name>, its entrypoint, an
// /etc/passwd naming user 65532, an empty /tmp, nothing else (no shell) —
// run as 65532:65532. Each image is written as an OCI image layout and a
// docker load tarball, with an SPDX SBOM from the binary's build
// information beside it. No registry and no daemon: go-containerregistry
// assembles the images in memory.
//
// Reproducible: every timestamp is the build's source date (the
// SOURCE_DATE_EPOCH environment variable, else the commit time the binary
// was stamped with, else the Unix epoch), the layer is written in a fixed
// order with fixed owners, so the same commit built with the same Go gives
// the same digests.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Binaries are the commands shipped as images, each from ./cmd/<name>:
// the services' binaries, callerauth-proxy, the token-refresher sidecar
// (callerauth-refresher), and the callerauth CLI (an operator's tool).
var Binaries = []string{"pdp", "platform-connector", "vmafx-controller", "vmafx-node", "vmafx-operator", "callerauth-proxy", "callerauth-refresher", "callerauth"}

// User is the user and group every image runs as (the "nonroot" user of
// distroless images); the charts' securityContexts name it too.
const User = 65532

// BinDir is where each image holds its binary.
const BinDir = "/usr/local/bin"

// Options say what to build and where.
type Options struct {
	// Root is the module's root directory (where go.mod is).
	Root string
	// Out is the output directory: <name>/ (an OCI image layout),
	// <name>.tar (docker load) and <name>.spdx.json per image, and
	// images.txt (one line per image: reference and digest).
	Out string
	// Registry is the repository prefix: the image of pdp is
	// <Registry>/pdp:<Tag>.
	Registry string
	// Tag is every image's tag (the charts' appVersion by default).
	Tag string
	// Platforms to build, as os/arch; linux only. Default: linux/<this
	// machine's arch>. Several make each image an index.
	Platforms []string
	// Binaries to build (default: all of Binaries).
	Binaries []string
	// Go is the go command (default "go").
	Go string
	// BuildVCS is passed as go build -buildvcs (default "auto": the
	// revision, commit time and dirty flag are stamped in a git checkout).
	BuildVCS string
	// Log receives a line per step (default: discarded).
	Log io.Writer
}

// Image is one built image.
type Image struct {
	Name      string // the binary, e.g. pdp
	Ref       string // <registry>/<name>:<tag>
	Digest    string // of the manifest (one platform) or the index
	Layout    string // the OCI image layout directory
	Tarballs  []string
	SBOM      string
	Platforms []string
}

// Build builds every image Options name.
func Build(ctx context.Context, o Options) ([]Image, error) {
	if err := o.complete(); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "callerauth-images-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	if err := os.MkdirAll(o.Out, 0o755); err != nil { //nolint:gosec // the images and SBOMs are published.
		return nil, err
	}
	// One go build per platform, every binary at once.
	bins := map[string]string{} // platform/name -> path
	for _, p := range o.Platforms {
		dir := filepath.Join(work, strings.ReplaceAll(p, "/", "_"))
		if err := o.goBuild(ctx, p, dir); err != nil {
			return nil, err
		}
		for _, b := range o.Binaries {
			bins[p+"/"+b] = filepath.Join(dir, b)
		}
	}
	// A build from a tree with uncommitted changes cannot pass for the
	// release: its tag and its revision label say so.
	if info, err := buildinfo.ReadFile(bins[o.Platforms[0]+"/"+o.Binaries[0]]); err == nil {
		if tag := dirtyTag(o.Tag, info); tag != o.Tag {
			fmt.Fprintf(o.Log, "images: the tree has uncommitted changes: tagged %s, not %s — not a release\n", tag, o.Tag)
			o.Tag = tag
		}
	}
	var out []Image
	for _, b := range o.Binaries {
		im, err := o.image(b, bins)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b, err)
		}
		out = append(out, im)
	}
	var list bytes.Buffer
	for _, im := range out {
		fmt.Fprintf(&list, "%s %s\n", im.Ref, im.Digest)
	}
	return out, os.WriteFile(filepath.Join(o.Out, "images.txt"), list.Bytes(), 0o644) //nolint:gosec // published beside the images.
}

func (o *Options) complete() error {
	if o.Root == "" || o.Out == "" || o.Registry == "" || o.Tag == "" {
		return errors.New("images: Root, Out, Registry and Tag are required")
	}
	if _, err := name.NewTag(o.Registry + "/pdp:" + o.Tag); err != nil {
		return fmt.Errorf("images: registry %q and tag %q do not make an image reference: %w", o.Registry, o.Tag, err)
	}
	if len(o.Platforms) == 0 {
		o.Platforms = []string{"linux/" + runtime.GOARCH}
	}
	for _, p := range o.Platforms {
		if os, arch, ok := strings.Cut(p, "/"); !ok || os != "linux" || arch == "" {
			return fmt.Errorf("images: platform %q: want linux/<arch>", p)
		}
	}
	if len(o.Binaries) == 0 {
		o.Binaries = Binaries
	}
	for _, b := range o.Binaries {
		if _, err := os.Stat(filepath.Join(o.Root, "cmd", b)); err != nil {
			return fmt.Errorf("images: binary %q: no ./cmd/%s", b, b)
		}
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.BuildVCS == "" {
		o.BuildVCS = "auto"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// goBuild builds every binary for platform into dir: static, -trimpath,
// without the symbol table and DWARF (the build information stays: go
// version -m and the SBOM read it).
func (o *Options) goBuild(ctx context.Context, platform, dir string) error {
	goos, goarch, _ := strings.Cut(platform, "/")
	args := []string{"build", "-trimpath", "-buildvcs=" + o.BuildVCS, "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}
	for _, b := range o.Binaries {
		args = append(args, "./cmd/"+b)
	}
	fmt.Fprintf(o.Log, "images: %s: go %s\n", platform, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, o.Go, args...) //nolint:gosec // the go command and this repository's packages.
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = o.Log, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("images: go build for %s: %w\n%s", platform, err, stderr.String())
	}
	return nil
}

func (o *Options) image(bin string, bins map[string]string) (Image, error) {
	ref := o.Registry + "/" + bin + ":" + o.Tag
	tag, err := name.NewTag(ref)
	if err != nil {
		return Image{}, err
	}
	im := Image{Name: bin, Ref: ref, Layout: filepath.Join(o.Out, bin), SBOM: filepath.Join(o.Out, bin+".spdx.json"), Platforms: o.Platforms}
	var (
		imgs  []v1.Image
		infos []*buildinfo.BuildInfo
		sums  []string
	)
	for _, p := range o.Platforms {
		path := bins[p+"/"+bin]
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			return Image{}, fmt.Errorf("reading the build information of %s: %w", path, err)
		}
		img, err := o.platformImage(bin, path, p, info)
		if err != nil {
			return Image{}, err
		}
		d, err := img.Digest()
		if err != nil {
			return Image{}, err
		}
		imgs, infos, sums = append(imgs, img), append(infos, info), append(sums, d.String())
	}
	_ = os.RemoveAll(im.Layout)
	lp, err := layout.Write(im.Layout, empty.Index)
	if err != nil {
		return Image{}, err
	}
	annotations := layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.Tag, // skopeo's oci:<dir>:<tag>
		"io.containerd.image.name":          ref,
	})
	if len(imgs) == 1 {
		d, _ := imgs[0].Digest()
		im.Digest = d.String()
		if err := lp.AppendImage(imgs[0], annotations); err != nil {
			return Image{}, err
		}
		t := filepath.Join(o.Out, bin+".tar")
		if err := tarball.WriteToFile(t, tag, imgs[0]); err != nil {
			return Image{}, err
		}
		im.Tarballs = []string{t}
	} else {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for i, p := range o.Platforms {
			goos, goarch, _ := strings.Cut(p, "/")
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: imgs[i], Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: goarch}}})
			t := filepath.Join(o.Out, bin+"."+goos+"-"+goarch+".tar")
			if err := tarball.WriteToFile(t, tag, imgs[i]); err != nil {
				return Image{}, err
			}
			im.Tarballs = append(im.Tarballs, t)
		}
		d, err := idx.Digest()
		if err != nil {
			return Image{}, err
		}
		im.Digest = d.String()
		if err := lp.AppendIndex(idx, annotations); err != nil {
			return Image{}, err
		}
	}
	sbom, err := SBOM(ref, im.Digest, o.Platforms, sums, infos, sourceDate(infos[0]))
	if err != nil {
		return Image{}, err
	}
	if err := os.WriteFile(im.SBOM, sbom, 0o644); err != nil { //nolint:gosec // the SBOM is published with the image.
		return Image{}, err
	}
	fmt.Fprintf(o.Log, "images: %s %s\n", ref, im.Digest)
	return im, nil
}

// platformImage is the image of one binary for one platform.
func (o *Options) platformImage(bin, path, platform string, info *buildinfo.BuildInfo) (v1.Image, error) {
	created := sourceDate(info)
	layerTar, err := rootFS(bin, path, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "make images: " + BinDir + "/" + bin, Comment: "callerauth " + info.Main.Version,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	goos, goarch, _ := strings.Cut(platform, "/")
	cf.OS, cf.Architecture = goos, goarch
	cf.Created = v1.Time{Time: created}
	u := strconv.Itoa(User)
	cf.Config = v1.Config{
		Entrypoint: []string{BinDir + "/" + bin},
		User:       u + ":" + u,
		WorkingDir: "/",
		Env:        []string{"PATH=" + BinDir},
		Labels: map[string]string{
			"org.opencontainers.image.title":    bin,
			"org.opencontainers.image.source":   "https://github.com/callerauth/callerauth",
			"org.opencontainers.image.version":  o.Tag,
			"org.opencontainers.image.revision": revision(info),
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.created":  created.UTC().Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootFS is the image's one layer, as a tar: directories, /etc/passwd and
// /etc/group naming the non-root user, /tmp (1777) and the binary, all
// owned by root and dated created.
func rootFS(bin, path string, created time.Time) ([]byte, error) {
	binary, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	u := strconv.Itoa(User)
	files := []struct {
		name string
		mode int64
		body []byte
	}{
		{"etc/", 0o755, nil},
		{"etc/group", 0o644, []byte("root:x:0:\nnonroot:x:" + u + ":\n")},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + u + ":" + u + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		{"home/", 0o755, nil},
		{"home/nonroot/", 0o700, nil},
		{"tmp/", 0o1777, nil},
		{"usr/", 0o755, nil},
		{"usr/local/", 0o755, nil},
		{"usr/local/bin/", 0o755, nil},
		{"usr/local/bin/" + bin, 0o755, binary},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: created, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if f.name == "home/nonroot/" {
			h.Uid, h.Gid, h.Uname, h.Gname = User, User, "nonroot", "nonroot"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sourceDate is the build's date: SOURCE_DATE_EPOCH, else the commit time
// stamped in the binary, else the Unix epoch.
func sourceDate(info *buildinfo.BuildInfo) time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	if t, err := time.Parse(time.RFC3339, setting(info, "vcs.time")); err == nil {
		return t.UTC()
	}
	return time.Unix(0, 0).UTC()
}

func setting(info *buildinfo.BuildInfo, key string) string {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// SBOM is an SPDX 2.3 document (JSON) for the image ref with digest: the
// image, its binary's main module, every module linked into it (from the
// build information, with its go.sum hash) and the Go standard library.
// sums are the per-platform image digests, infos the per-platform build
// information (the modules are the same on every platform).
func SBOM(ref, digest string, platforms, sums []string, infos []*buildinfo.BuildInfo, created time.Time) ([]byte, error) {
	info := infos[0]
	type extRef struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type pkg struct {
		Name             string   `json:"name"`
		SPDXID           string   `json:"SPDXID"`
		VersionInfo      string   `json:"versionInfo,omitempty"`
		DownloadLocation string   `json:"downloadLocation"`
		FilesAnalyzed    bool     `json:"filesAnalyzed"`
		Purpose          string   `json:"primaryPackagePurpose,omitempty"`
		Comment          string   `json:"comment,omitempty"`
		ExternalRefs     []extRef `json:"externalRefs,omitempty"`
	}
	type rel struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
	repo, _, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
	imageID, mainID := "SPDXRef-Image", "SPDXRef-Package-main"
	var imgComment []string
	for i, p := range platforms {
		imgComment = append(imgComment, p+": "+sums[i])
	}
	pkgs := []pkg{
		{Name: ref, SPDXID: imageID, VersionInfo: digest, DownloadLocation: "NOASSERTION", Purpose: "CONTAINER",
			Comment: "platforms: " + strings.Join(imgComment, ", "),
			ExternalRefs: []extRef{{"PACKAGE-MANAGER", "purl", "pkg:oci/" + repo + "@" + strings.Replace(digest, ":", "%3A", 1) +
				"?repository_url=" + strings.Split(ref, ":")[0]}}},
		{Name: info.Main.Path, SPDXID: mainID, VersionInfo: info.Main.Version, DownloadLocation: "NOASSERTION", Purpose: "APPLICATION",
			Comment:      "binary " + info.Path + " (" + strings.Join(settings(info), ", ") + ")",
			ExternalRefs: []extRef{{"PACKAGE-MANAGER", "purl", purl(info.Main.Path, info.Main.Version)}}},
		{Name: "stdlib", SPDXID: "SPDXRef-Package-stdlib", VersionInfo: info.GoVersion, DownloadLocation: "NOASSERTION", Purpose: "LIBRARY",
			ExternalRefs: []extRef{{"PACKAGE-MANAGER", "purl", purl("stdlib", info.GoVersion)}}},
	}
	rels := []rel{{"SPDXRef-DOCUMENT", "DESCRIBES", imageID}, {imageID, "CONTAINS", mainID}, {mainID, "DEPENDS_ON", "SPDXRef-Package-stdlib"}}
	deps := append([]*debugModule(nil), modules(info)...)
	sort.Slice(deps, func(i, j int) bool { return deps[i].path < deps[j].path })
	for i, d := range deps {
		id := "SPDXRef-Package-" + strconv.Itoa(i+1)
		p := pkg{Name: d.path, SPDXID: id, VersionInfo: d.version, DownloadLocation: "NOASSERTION", Purpose: "LIBRARY",
			ExternalRefs: []extRef{{"PACKAGE-MANAGER", "purl", purl(d.path, d.version)}}}
		if d.sum != "" {
			p.Comment = "go.sum " + d.sum
		}
		if d.replaced != "" {
			p.Comment = strings.TrimSpace(p.Comment + "; replaced by " + d.replaced)
		}
		pkgs = append(pkgs, p)
		rels = append(rels, rel{mainID, "DEPENDS_ON", id})
	}
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              ref,
		"documentNamespace": "https://github.com/callerauth/callerauth/spdx/" + repo + "/" + strings.TrimPrefix(digest, "sha256:"),
		"creationInfo": map[string]any{
			"created":  created.UTC().Format(time.RFC3339),
			"creators": []string{"Tool: callerauth make images", "Organization: callerauth"},
		},
		"packages":      pkgs,
		"relationships": rels,
	}
	return json.MarshalIndent(doc, "", "  ")
}

type debugModule struct{ path, version, sum, replaced string }

func modules(info *buildinfo.BuildInfo) []*debugModule {
	var out []*debugModule
	for _, d := range info.Deps {
		m := &debugModule{path: d.Path, version: d.Version, sum: d.Sum}
		if d.Replace != nil {
			m.replaced = d.Replace.Path + "@" + d.Replace.Version
			m.sum = d.Replace.Sum
		}
		out = append(out, m)
	}
	return out
}

func settings(info *buildinfo.BuildInfo) []string {
	var out []string
	for _, s := range info.Settings {
		switch s.Key {
		case "GOOS", "GOARCH", "CGO_ENABLED", "-trimpath", "vcs.revision", "vcs.time", "vcs.modified":
			out = append(out, s.Key+"="+s.Value)
		}
	}
	return out
}

// purl is the package URL of a Go module (the purl spec's golang type).
func purl(path, version string) string {
	if version == "" || version == "(devel)" {
		return "pkg:golang/" + path
	}
	return "pkg:golang/" + path + "@" + version
}

// dirtyTag is tag, marked -dirty when info says the binary was built from
// a tree with uncommitted changes (go build's vcs.modified).
func dirtyTag(tag string, info *buildinfo.BuildInfo) string {
	if setting(info, "vcs.modified") != "true" || strings.HasSuffix(tag, "-dirty") {
		return tag
	}
	return tag + "-dirty"
}

// revision is the commit info was built from, marked -dirty (as git
// describe --dirty does) when the tree had uncommitted changes.
func revision(info *buildinfo.BuildInfo) string {
	r := setting(info, "vcs.revision")
	if r != "" && setting(info, "vcs.modified") == "true" {
		r += "-dirty"
	}
	return r
}
