#!/usr/bin/perl
# wdb-read.pl -- drive WDB 2.10's own Hina-Di reader (wdblib.pl) against a
# remote hina.di and print what WDB holds per entry, plus WDB's own
# trust-or-recheck decision.
#
# Usage:
#   perl wdb-read.pl [options] URL-or-PATH
#   perl wdb-read.pl --dates 'Thu, 26 Nov 2026 01:00:00 GMT' '2026/11/26 01:00:00' ...
#
# Options:
#   --wdb DIR          WDB work tree (default /tmp/wdb). Must contain wdblib.pl, wdb.ph and
#                      the patched jcode.pl (see README.md).
#   --workdir DIR      where WDB writes its files (SAVEAS copy, debug log, its own hina.di);
#                      default: a fresh temp dir. Kept after the run.
#   --antenna-uri URI  value of WDB's $ANTENNA_URI ("my own antenna"); default
#                      http://wdb-antenna.invalid/antenna/
#   --page URL         register a PAGE: (a site WDB is configured to watch) for URL; repeatable.
#                      Default: every URL: line found in the file (pre-scanned by this driver,
#                      not by WDB), so every entry can be matched.
#   --page-method M    METHOD: of those PAGE: entries (HEAD GET HEAD2 GET2 REMOTE); default none
#                      (= WDB default HEAD).
#   --overall          use WDB's $OVERALL=1 mode (remote entries create PAGEs themselves,
#                      with METHOD REMOTE) instead of pre-registered PAGEs.
#   --tz TZ            WDB's $TZ (default JST, as in wdb.ph) - zone assumed for dates without zone.
#
# Real code paths used: ReadCFGFile, StartDance -> ReadRemortFile -> DownloadRemoteFileHTTP ->
# DownloadHTTP (raw socket HTTP/1.0 GET, WDB's own) -> `nkf -e` -> ParseHinaDI -> ExtractNormalDate;
# then StartDance's own trust test. Only DownloadDocumentHTTP (the request WDB would send to the
# watched site itself) is replaced by a stub that records the request instead of sending it.
# Print_HINADI is then called so you can also see how WDB would re-publish the entry.

use strict;
no strict 'vars';
no warnings;
use File::Temp qw(tempdir);
use Cwd qw(abs_path getcwd);
use Encode ();

my $wdbdir = '/tmp/wdb';
my $workdir = '';
my $antenna_uri = 'http://wdb-antenna.invalid/antenna/';
my @pages;
my $page_method = '';
my $overall = 0;
my $tz = 'JST';
my $dates_mode = 0;
my @args;
while (@ARGV) {
    my $a = shift @ARGV;
    if    ($a eq '--wdb')         { $wdbdir = shift @ARGV }
    elsif ($a eq '--workdir')     { $workdir = shift @ARGV }
    elsif ($a eq '--antenna-uri') { $antenna_uri = shift @ARGV }
    elsif ($a eq '--page')        { push @pages, shift @ARGV }
    elsif ($a eq '--page-method') { $page_method = shift @ARGV }
    elsif ($a eq '--overall')     { $overall = 1 }
    elsif ($a eq '--tz')          { $tz = shift @ARGV }
    elsif ($a eq '--dates')       { $dates_mode = 1 }
    elsif ($a =~ /^--/)           { die "unknown option $a\n" }
    else                          { push @args, $a }
}
die "usage: $0 [options] URL-or-PATH\n       $0 --dates DATE...\n" unless @args;

$wdbdir = abs_path($wdbdir);
if ($workdir) { require File::Path; File::Path::make_path($workdir); $workdir = abs_path($workdir) }
else { $workdir = tempdir('wdb-read-XXXXXX', TMPDIR => 1) }
my $src = $args[0];
$src = abs_path($src) if !$dates_mode && $src !~ m{^https?://} && -e $src;
chdir $workdir or die "chdir $workdir: $!";

# ---- WDB globals that dance.pl (the user's config script) normally sets ----
$DEBUG       = 1;
$DEBUGOUT    = "$workdir/wdb.debug";
$DIOUT       = "$workdir/wdb-out.di";
$HINAOUT     = "";
$WDBFILE     = "$workdir/config.wdb";
$ANTENNA_URI = $antenna_uri;
$OVERALL     = $overall;
$TZ          = $tz;

unshift @INC, $wdbdir;    # shim: Perl >= 5.26 has no '.' in @INC; also picks the patched jcode.pl
require 'wdblib.pl';      # -> require 'jcode.pl'; require 'wdb.ph'

sub esc { my $s = shift; return '' unless defined $s; $s =~ s/([^\x20-\x7e])/sprintf("\\x%02X", ord $1)/ge; $s }
sub hexs { my $s = shift; join ' ', map { sprintf '%02X', ord } split //, $s }
sub out {
    my ($k, $v) = @_;
    if (!defined $v) { print "$k\t(undef)\n"; return }
    print "$k\t", esc($v), "\n";
    if ($v =~ /[^\x20-\x7e]/) {
        print "$k#hex\t", hexs($v), "\n";
        my $u = eval { Encode::decode('euc-jp', $v, Encode::FB_CROAK) };
        print "$k#utf8(from WDB-internal EUC-JP)\t", (defined $u ? Encode::encode('UTF-8', $u) : '(not valid EUC-JP)'), "\n";
    }
}

if ($dates_mode) {
    &Initialize();
    print "NOWTIME\t$NOWTIME\nIGNORETIME\t$IGNORETIME\nEXPIRETIME\t$EXPIRETIME\nTZ\t$TZ\n";
    for my $d (@args) {
        my $r1 = &ExtractNormalDate($d, $IGNORETIME); my $f1 = $EXTRACTTIMEFORMAT;
        my $r2 = &ExtractNormalDate($d, $FUTURETIME); my $f2 = $EXTRACTTIMEFORMAT;
        print "date\t$d\n  as Last-Modified/LMD (ignoretime=IGNORETIME)\t$r1\t[$f1]\n  as Expires (ignoretime=FUTURETIME)\t$r2\t[$f2]\n";
    }
    exit 0;
}

# ---- discover URLs to register as PAGE: (driver-side, only to build config.wdb) ----
if (!@pages && !$overall) {
    my $body;
    if ($src =~ m{^https?://}) {
        require HTTP::Tiny;
        my $r = HTTP::Tiny->new->get($src);
        die "pre-scan GET $src failed: $r->{status}\n" unless $r->{success};
        $body = $r->{content};
    } else {
        open my $fh, '<:raw', $src or die "$src: $!"; local $/; $body = <$fh>;
    }
    for (split /\r?\n/, $body) { push @pages, $1 if /^URL:[ \t]*(\S+)/i }
}

open my $cfg, '>', $WDBFILE or die;
print $cfg "REMOTE:\t\tsrc\nURI:\t\t$src\nTITLE:\t\tsource antenna\nMARK:\t\tr\nSAVEAS:\t\tremote.hr\n\n";
my $n = 0;
for my $p (@pages) {
    $n++;
    print $cfg "PAGE:\t\tp$n\nURI:\t\t$p\n";
    print $cfg "METHOD:\t\t$page_method\n" if $page_method ne '';
    print $cfg "\n";
}
close $cfg;

# ---- stub: the request WDB would send to the watched site itself ----
our %WOULD_FETCH;
{
    no warnings 'redefine';
    *main::DownloadDocumentHTTP = sub {
        my ($pagename, $method, $saveas) = @_;
        my $uri = $DP{$pagename, 'X-VirtualURI'} ne '' ? $DP{$pagename, 'X-VirtualURI'} : $DP{$pagename, 'URI'};
        $WOULD_FETCH{$pagename} = "$method $uri (If-Modified-Since from Last-Modified=" . ($DP{$pagename, 'Last-Modified'} // '') . ")";
        return (2, '');    # not 0 => StartDance skips ParseDocumentLocal
    };
}

# ---- observer: snapshot ParseHinaDI's dynamically-scoped `local %nodelist` each time it
# evaluates a finished block (its first act is ExtractNormalDate(Last-Modified)); read-only.
our @BLOCKS;
{
    no warnings 'redefine';
    my $orig = \&main::ExtractNormalDate;
    my $lm_line = 0;    # line of ParseHinaDI's `$lmdate = &ExtractNormalDate( $nodelist{ "Last-Modified" }, ...` call
    if (open my $w, '<', "$wdbdir/wdblib.pl") {
        my $in = 0;
        while (<$w>) { $in = 1 if /^sub ParseHinaDI/; if ($in && /\$lmdate = &ExtractNormalDate\( \$nodelist\{ "Last-Modified" \}/) { $lm_line = $.; last } }
    }
    die "cannot locate ParseHinaDI's Last-Modified call in wdblib.pl\n" unless $lm_line;
    *main::ExtractNormalDate = sub {
        my @c0 = caller(0);
        if ($c0[2] == $lm_line && $c0[1] =~ /wdblib\.pl$/) {
            my %copy = %nodelist;
            my $r = $orig->(@_);
            push @BLOCKS, { fields => \%copy, href => $href, lmdate => $r };
            return $r;
        }
        return $orig->(@_);
    };
}

&Initialize();
&ReadCFGFile();
print "# WDB 2.10 wdblib.pl, source=$src, workdir=$workdir\n";
print "NOWTIME\t$NOWTIME\nIGNORETIME(now+1h)\t$IGNORETIME\nEXPIRETIME(now+${DEFAULT_EXPIRETIME}h)\t$EXPIRETIME\nANTENNA_URI\t$ANTENNA_URI\nTZ\t$TZ\n";
my %snap_method = map { $DPL[$_] => $DP{$DPL[$_], 'METHOD'} } 0 .. $DPLNO - 1;
&StartDance();    # ReadRemortFile + trust test + (stubbed) site checks
&Print_HINADI();
&CloseDebugFile();

my @order = (@HINADI_CMDNAMELIST);
@order = grep { $_ ne 'TERMINATE' } @order;

# ---- 1. what ParseHinaDI held for each block it evaluated (raw, after `nkf -e` + its line regex)
my $bn = 0;
for my $b (@BLOCKS) {
    $bn++;
    my %fl = %{$b->{fields}};
    print "\n=== ParseHinaDI block $bn: raw %nodelist (values exactly as WDB holds them, EUC-JP bytes)\n";
    print "block.href(normalised URL key)\t", esc($b->{href}), "\n";
    print "block.ExtractNormalDate(Last-Modified)\t$b->{lmdate}", ($b->{lmdate} eq $ERRTIME ? "  => ERRTIME: block discarded (`next`)" : ''), "\n";
    for my $k (sort grep { /$;/ } keys %fl) { my ($h, $kk) = split /$;/, $k; out("header.$kk", $fl{$k}) }
    for my $k (@order) { out($k, $fl{$k}) if exists $fl{$k} }
}
print "\n(ParseHinaDI evaluated ", scalar(@BLOCKS), " block(s); a block is only evaluated when an empty line follows it)\n";

# ---- 2. per PAGE: WDB's %DP after ReadRemortFile + StartDance's decision
for my $i (0 .. $DPLNO - 1) {
    my $dpl = $DPL[$i];
    my %f;
    for my $k (keys %DP) {
        my ($d, $field) = split /$;/, $k, 2;
        next unless defined $field && $d eq $dpl;
        $f{$field} = $DP{$k};
    }
    print "\n=== PAGE $dpl: %DP after remote merge (config URI $DP{$dpl,'URI'})\n";
    my $applied = (defined $DP{$dpl, 'Last-Modified'} && $DP{$dpl, 'Last-Modified'} ne '') ? 'yes' : 'no';
    print "wdb.applied-from-remote\t$applied\n";
    my %seen;
    for my $k (@order) { if (exists $f{$k}) { out($k, $f{$k}) } else { print "$k\t(absent)\n" } $seen{$k} = 1 }
    for my $k (sort keys %f) { next if $seen{$k}; out($k, $f{$k}) }
    # StartDance's own test, re-evaluated here only to explain the outcome:
    my $au = $DP{$dpl, 'Authorized-url'};
    my $ex = $DP{$dpl, 'Expire'};
    print "check.METHOD\t", ($DP{$dpl, 'METHOD'} // '(undef)'), "\n";
    print "check.defined(Authorized-url)\t", (defined $au ? 1 : 0), "\n";
    print "check.Authorized-url ne ANTENNA_URI\t", ((defined $au && $au ne $ANTENNA_URI) ? 1 : 0), "\n";
    print "check.defined(Expire)\t", (defined $ex ? 1 : 0), "\n";
    print "check.Expire gt NOWTIME (string compare)\t", ((defined $ex && $ex gt $NOWTIME) ? 1 : 0), "\n";
    my $m = $snap_method{$dpl};
    my $decision;
    if (exists $WOULD_FETCH{$dpl}) { $decision = "RECHECK: WDB would request the site itself: $WOULD_FETCH{$dpl}" }
    elsif (($DP{$dpl, 'METHOD'} // '') eq 'REMOTE') { $decision = "NO-FETCH: PAGE METHOD is REMOTE (never checks the site; uses whatever remote data it has)" }
    else { $decision = "TRUST: 'USE REMOTE Data' - remote Last-Modified kept, no request to the site" }
    print "decision\t$decision\n";
}

print "\n=== WDB's own re-published hina.di (Print_HINADI -> $DIOUT), escaped:\n";
if (open my $o, '<:raw', $DIOUT) { while (<$o>) { chomp; print "| ", esc($_), "\n" } }
print "\n# debug log: $DEBUGOUT\n";
