#!/usr/bin/ruby
# -*- coding: binary -*-
# tama-read.rb -- drive TAMATEBAKO (tama) 1.1.66's own Hina-Di reader against a remote hina.di
# and print what tama holds per entry, plus tama's own "use remote or re-check" decision.
#
# Usage:
#   ruby tama-read.rb [options] URL-or-PATH
#   ruby tama-read.rb --dates 'Thu, 26 Nov 2026 01:00:00 GMT' ...
#
# Options:
#   --tama DIR          tama tree to load lib/ and bin/tama.rb from (default /tmp/tama-run/1.1.66 =
#                       original 1.1.66 tarball; /tmp/tama-run/HEAD = wakaba's 1.1.66-mod1). These
#                       are copies whose line 1 (a comment) was replaced by a coding magic comment.
#   --remote-url URL    the "URL:" of the remote.cfg entry (antenna_url: becomes X-TAMA-Remote-URL and
#                       triggers methods=["REMOTE"]+...). Default: the source itself.
#   --site-option OPTS  Option: of the simulated sites.cfg entry, e.g. NO_REMOTE or DI,GET. Default none.
#   --workdir DIR       where _remote.di (tama's intermediate file) is written. Default: temp dir.
#   --start EPOCH       value of $start ("now" for the expiry test). Default: Time.now.
#   --export-lifetime N $export_lifetime (default 28800 = 8h, as tama.rb/tama.cfg).
#
# Code paths used (tama's own): DI::open -> Antenna#read -> HTTP1::get (tama's raw-socket HTTP/1.0)
# -> String#split(/\r?\n/) -> DI#parse -> Website::di -> str2unixtime; Antenna#merge! ; Antenna#save
# ("DI") to _remote.di ; DI::open(_remote.di) (exactly as bin/tama.rb get_remote + main do);
# then bin/tama.rb's own get_site() (extracted from bin/tama.rb at run time and eval'd) for a
# sites.cfg entry with the same URL, with HTTP1::head/HTTP1::get stubbed to record the request
# instead of sending it to the (remote) site.

require 'timeout'
require 'tmpdir'
require 'stringio'

opts = { tama: '/tmp/tama-run/1.1.66', remote_url: nil, site_option: '', workdir: nil,
         start: nil, lifetime: 28800, dates: false }
args = []
until ARGV.empty?
  a = ARGV.shift
  case a
  when '--tama' then opts[:tama] = ARGV.shift
  when '--remote-url' then opts[:remote_url] = ARGV.shift
  when '--site-option' then opts[:site_option] = ARGV.shift
  when '--workdir' then opts[:workdir] = ARGV.shift
  when '--start' then opts[:start] = ARGV.shift.to_i
  when '--export-lifetime' then opts[:lifetime] = ARGV.shift.to_i
  when '--dates' then opts[:dates] = true
  when /^--/ then abort "unknown option #{a}"
  else args << a
  end
end
abort "usage: #{$0} [options] URL-or-PATH | --dates DATE..." if args.empty?

# ---------------- shims for running Ruby-1.6/1.8 code on Ruby 3.1 ----------------
begin
  # Ruby 1.8 strings were byte strings ($KCODE NONE); make socket/file reads binary so that
  # EUC-JP/Shift_JIS bytes don't raise "invalid byte sequence in UTF-8" in =~ / split.
  Encoding.default_external = Encoding::ASCII_8BIT
  Encoding.default_internal = nil
end
TRUE = true unless defined?(TRUE)      # removed in Ruby 3.0
FALSE = false unless defined?(FALSE)
module Kernel                           # Kernel#timeout removed (Ruby 2.x); tama calls timeout(n){...}
  private
  def timeout(n, *rest, &b) Timeout.timeout(n, *rest, &b) end
end
class Object                            # Object#type removed in Ruby 1.9 (1.1.66 uses x.type != String)
  def type; self.class; end
end
$gzip = 'gzip'
# -------------------------------------------------------------------------------

$:.unshift File.join(opts[:tama], 'lib')
require 'func.rb'
require 'url.rb'
require 'website.rb'
require 'antenna.rb'
require 'di.rb'
require 'tama_m.rb'
require 'http1.rb'
require 'sites.rb'

$start = opts[:start] || Time.now.to_i
$export_lifetime = opts[:lifetime]
$tz = 'JST'
$referer = ''
$OPT_verbose = true
$OPT_debug = true

def esc(s)
  return '(nil)' if s.nil?
  s.to_s.b.gsub(/[^\x20-\x7e]/n) { |c| format('\\x%02X', c.ord) }
end

def show(k, v)
  puts "#{k}\t#{esc(v)}"
  if v.is_a?(String) && v.b =~ /[^\x20-\x7e]/n
    puts "#{k}#hex\t#{v.b.unpack('C*').map { |c| format('%02X', c) }.join(' ')}"
    guess = NKF.guess(v.b) rescue nil
    u = (NKF.nkf('-w -x -m0 --cp932', v.b) rescue nil)
    puts "#{k}#display(driver: nkf guessed #{guess}, shown as UTF-8; tama itself keeps the bytes above)\t#{u}"
  end
end

def t(x)
  return x.inspect unless x.is_a?(Integer)
  x == 0 ? '0' : "#{x} (#{Time.at(x).utc.strftime('%a, %d %b %Y %H:%M:%S GMT')})"
end

def dump_website(w, prefix)
  puts "#{prefix}.url\t#{esc(w.url)}"
  puts "#{prefix}.checkurl\t#{esc(w.checkurl)}"
  show("#{prefix}.title(@title)", w.instance_variable_get(:@title))
  show("#{prefix}.author(@author)", w.instance_variable_get(:@author))
  puts "#{prefix}.lastmodified\t#{t(w.lastmodified)}"
  puts "#{prefix}.lastdetected\t#{t(w.lastdetected)}"
  puts "#{prefix}.@expires(parsed Expires||Expire)\t#{t(w.instance_variable_get(:@expires))}"
  puts "#{prefix}.expires(effective: @expires, else lastdetected+$export_lifetime)\t#{t(w.expires)}"
  puts "#{prefix}.size\t#{w.size}"
  puts "#{prefix}.code\t#{w.code}"
  puts "#{prefix}.methods\t#{w.methods.inspect}"
  puts "#{prefix}.method\t#{w.method}"
  puts "#{prefix}.authorized(Authorized-url)\t#{esc(w.authorized)}"
  puts "#{prefix}.remoteurl\t#{esc(w.remoteurl)}"
  puts "#{prefix}.keyword(X-TAMA-Keyword)\t#{esc(w.keyword)}"
  puts "#{prefix}.tz\t#{esc(w.tz)}"
  w.di.each { |k, v| show("#{prefix}.di[#{k}]", v) }
end

if opts[:dates]
  puts "$start\t#{t($start)}"
  args.each do |d|
    puts "date\t#{d}\n  str2unixtime(s)\t#{t(str2unixtime(d))}\n  str2unixtime(s,'JST')\t#{t(str2unixtime(d, 'JST'))}"
  end
  exit 0
end

src = args[0]
src = File.expand_path(src) if src !~ %r{^[a-z]+://} && File.exist?(src)
remote_url = opts[:remote_url] || src
workdir = opts[:workdir] || Dir.mktmpdir('tama-read-')
require 'fileutils'; FileUtils.mkdir_p(workdir)
remote_file = File.join(workdir, '_remote.di')

puts "# tama #{TAMA::Version} from #{opts[:tama]}, source=#{src}, remote_url=#{remote_url}, workdir=#{workdir}"
puts "$start(now)\t#{t($start)}"
puts "$export_lifetime\t#{$export_lifetime}"

# ---- stage 1: get_remote() equivalent (bin/tama.rb:137-158) ----
log = StringIO.new
$stdout = log
antenna = DI::open(src, remote_url)
$stdout = STDOUT
puts "tama.log(stage1)\t#{esc(log.string)}" unless log.string.empty?
puts "HTTP1.traffic(bytes of body read)\t#{HTTP1.traffic}"
puts "\n##### stage 1: entries as parsed from the remote file (DI::open(src, antenna_url))"
puts "entries\t#{antenna.size}"
antenna.each_with_index { |w, i| puts "\n=== stage1 entry #{i + 1}"; dump_website(w, 'w') }

sites_remote = Antenna::new
sites_remote.merge!(antenna)
sites_remote.save(remote_file, "DI")
puts "\n##### tama's intermediate #{remote_file} (Antenna#save 'DI'), escaped:"
File.open(remote_file, 'rb') { |f| f.read.split(/\n/, -1).each { |l| puts "| #{esc(l)}" } }

# ---- stage 2: main re-reads it (bin/tama.rb:389-393) ----
sites_remote2 = DI::open(remote_file)
puts "\n##### stage 2: entries as get_site() sees them (DI::open(_remote.di))"
puts "entries\t#{sites_remote2.size}"

# ---- decision: bin/tama.rb's own get_site, extracted verbatim ----
tama_rb = File.open(File.join(opts[:tama], 'bin', 'tama.rb'), 'rb') { |f| f.read }
code = tama_rb[/^def get_site\(.*?^end\n/m] or abort "get_site not found in bin/tama.rb"
eval(code, TOPLEVEL_BINDING, File.join(opts[:tama], 'bin', 'tama.rb'), tama_rb[0, tama_rb.index(code)].count("\n") + 1)

$WOULD_FETCH = []
class HTTP1
  def HTTP1.head(url, headers = {}); $WOULD_FETCH << "HEAD #{url}"; HTTP1::new(url); end  # code 0
  def HTTP1.get(url, headers = {}); $WOULD_FETCH << "GET #{url}"; HTTP1::new(url); end
end
class Site
  alias_method :__orig_check_ftp, :check_ftp
  def check_ftp(cache = nil); $WOULD_FETCH << "FTP #{@checkurl}"; __orig_check_ftp(cache) rescue nil; end
end

option = {}
opts[:site_option].split(/,/).each { |op| op =~ /(.*?)=(.*)/ ? option[$1] = $2 : option[op] = 'yes' }

sites_remote2.each_with_index do |remote, i|
  puts "\n=== stage2 entry #{i + 1}"
  dump_website(remote, 'w')
  site = Site::new('', '', remote.url, '', option)     # a sites.cfg entry with the same URL
  $WOULD_FETCH = []
  log = StringIO.new
  $stdout = log
  result = get_site(site, nil, remote)
  $stdout = STDOUT
  puts "check.site.option\t#{option.inspect}"
  puts "check.remote.expires > $start\t#{remote.expires > $start} (#{remote.expires} > #{$start})"
  puts "check.remote.lastmodified != 0\t#{remote.lastmodified != 0}"
  puts "get_site.verbose\t#{esc(log.string)}"
  if result.equal?(remote)
    puts "decision\tTRUST: get_site returned the remote entry ('Use remote'); no request to the site"
  else
    puts "decision\tRECHECK: tama would request the site itself: #{$WOULD_FETCH.join(', ')}"
  end
  if result && result.equal?(remote)
    puts "get_site.result.to_di (how tama re-publishes it in sites.di; out_tama may still override Title/Author from sites.cfg):"
    result.to_di.split(/\n/, -1).each { |l| puts "| #{esc(l)}" }
  end
end
