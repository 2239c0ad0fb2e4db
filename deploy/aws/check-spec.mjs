#!/usr/bin/env node
// check-spec: checks a CloudFormation template offline, without AWS credentials.
//
//   node check-spec.mjs TEMPLATE
//       Every resource against the CloudFormation resource specification of @aws-cdk/cfnspec: the type exists,
//       every property (and nested property, through literal maps, lists and both branches of Fn::If) exists
//       and has the right shape, every required one is there; and every Ref, Fn::GetAtt, Fn::Sub variable,
//       condition and DependsOn names something the template or CloudFormation defines.
//   node check-spec.mjs --cfn-lint TEMPLATE PARAMETERS_JSON
//       cfn-lint once per named parameter set in PARAMETERS_JSON ({"name": {"Param": "value"}}), with the
//       specification cfn-lint bundles extended by the definitions it lacks (it dates from 2019 and knows
//       neither IMDSv2 options nor CapacityRebalance); additions only, nothing of cfn-lint's own is replaced.
//   node check-spec.mjs --user-data RESOURCE TEMPLATE
//       Prints the user data script of a launch template as CloudFormation would render it (Fn::Sub with
//       parameter defaults or placeholders), for sh -n and shellcheck.
//
// Problems go to stderr, one line each, "error: PATH: what"; exit 1 if there are any, 2 for bad usage or a
// template that cannot be read.

import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const yaml = require('js-yaml');
const CFNSPEC_VERSION = require('@aws-cdk/cfnspec/package.json').version;
// The JSON itself: the package's specification() drops struct-typed attributes, which Fn::GetAtt may name.
const SPEC = JSON.parse(readFileSync(require.resolve('@aws-cdk/cfnspec/spec/specification.json'), 'utf8'));

const PSEUDO_PARAMETERS = {
  'AWS::AccountId': '123456789012',
  'AWS::NotificationARNs': '',
  'AWS::NoValue': '',
  'AWS::Partition': 'aws',
  'AWS::Region': 'us-east-1',
  'AWS::StackId': 'arn:aws:cloudformation:us-east-1:123456789012:stack/gridtrain/0',
  'AWS::StackName': 'gridtrain',
  'AWS::URLSuffix': 'amazonaws.com',
};
const RESOURCE_KEYS = new Set(['Type', 'Properties', 'DependsOn', 'Condition', 'Metadata', 'CreationPolicy',
  'UpdatePolicy', 'DeletionPolicy', 'UpdateReplacePolicy']);

// ---- YAML with CloudFormation's short tags ----

const FUNCTIONS = ['And', 'Base64', 'Cidr', 'Contains', 'EachMemberEquals', 'EachMemberIn', 'Equals', 'FindInMap',
  'GetAZs', 'If', 'ImportValue', 'Join', 'Length', 'Not', 'Or', 'RefAll', 'Select', 'Split', 'Sub', 'ToJsonString',
  'Transform', 'ValueOf', 'ValueOfAll'];

function cfnSchema() {
  const types = [];
  const tag = (name, construct) => {
    for (const kind of ['scalar', 'sequence', 'mapping'])
      types.push(new yaml.Type(`!${name}`, { kind, construct: (data) => construct(data, kind) }));
  };
  tag('Ref', (data) => ({ Ref: data }));
  tag('Condition', (data) => ({ Condition: data }));
  // !GetAtt Resource.Attribute: the attribute itself may hold dots (Endpoint.Address).
  tag('GetAtt', (data, kind) => {
    if (kind !== 'scalar') return { 'Fn::GetAtt': data };
    const dot = String(data).indexOf('.');
    return { 'Fn::GetAtt': dot < 0 ? [data] : [data.slice(0, dot), data.slice(dot + 1)] };
  });
  for (const name of FUNCTIONS) tag(name, (data) => ({ [`Fn::${name}`]: data }));
  // CORE, not the default schema: CloudFormation reads 2010-09-09 as a string, not a date.
  const base = yaml.CORE_SCHEMA;
  return typeof base.extend === 'function' ? base.extend(types) : yaml.Schema.create(base, types);
}

function loadTemplate(file) {
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    fatal(`${file}: cannot read it: ${e.message}`);
  }
  let template;
  try {
    template = yaml.load(text, { schema: cfnSchema(), filename: file });
  } catch (e) {
    fatal(`${file}: not valid YAML: ${e.message.split('\n')[0]}`);
  }
  if (!isMap(template)) fatal(`${file}: not a template (expected a map at the top)`);
  return template;
}

// ---- helpers ----

function fatal(message) {
  console.error(`error: ${message}`);
  process.exit(2);
}

const isMap = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const isIntrinsic = (v) => isMap(v) && Object.keys(v).length === 1 &&
  (Object.keys(v)[0] === 'Ref' || Object.keys(v)[0] === 'Condition' || Object.keys(v)[0].startsWith('Fn::'));
const isNoValue = (v) => isMap(v) && v.Ref === 'AWS::NoValue';
const describe = (v) => (Array.isArray(v) ? 'a list' : isMap(v) ? 'a map' : v === null ? 'null' : `a ${typeof v}`);

function distance(a, b) {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i]);
  for (let j = 1; j <= b.length; ++j) d[0][j] = j;
  for (let i = 1; i <= a.length; ++i)
    for (let j = 1; j <= b.length; ++j)
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
  return d[a.length][b.length];
}

function suggestion(name, candidates) {
  let best = null;
  let bestDistance = Infinity;
  for (const c of candidates) {
    const dist = c.toLowerCase() === name.toLowerCase() ? 0 : distance(name, c);
    if (dist < bestDistance) [best, bestDistance] = [c, dist];
  }
  return best !== null && bestDistance <= Math.max(2, Math.floor(name.length / 4)) ? ` (did you mean ${best}?)` : '';
}

// ---- the specification check ----

class SpecCheck {
  constructor(template) {
    this.template = template;
    this.problems = [];
    this.resources = 0;
    this.properties = 0;
    this.used = new Set(); // "Type.Property" of every property checked, for --cfn-lint's report
  }

  error(path, message) {
    this.problems.push(`error: ${path}: ${message}`);
  }

  propertyType(owner, name) {
    return SPEC.PropertyTypes[`${owner}.${name}`] ?? SPEC.PropertyTypes[name];
  }

  run() {
    const t = this.template;
    if (!isMap(t.Resources) || Object.keys(t.Resources).length === 0) {
      this.error('Resources', 'a template needs at least one resource');
      return this;
    }
    for (const [name, resource] of Object.entries(t.Resources)) this.resource(name, resource);
    this.references();
    return this;
  }

  resource(name, resource) {
    const path = `Resources.${name}`;
    ++this.resources;
    if (!isMap(resource)) return this.error(path, `expected a map, got ${describe(resource)}`);
    for (const key of Object.keys(resource))
      if (!RESOURCE_KEYS.has(key))
        this.error(`${path}.${key}`, `not a resource attribute${suggestion(key, RESOURCE_KEYS)}`);
    const type = resource.Type;
    if (typeof type !== 'string') return this.error(`${path}.Type`, 'missing, or not a string');
    if (type.startsWith('Custom::') || type === 'AWS::CloudFormation::CustomResource') return; // any properties
    const spec = SPEC.ResourceTypes[type];
    if (!spec) {
      const hint = suggestion(type, Object.keys(SPEC.ResourceTypes));
      return this.error(`${path}.Type`, `unknown resource type ${type}${hint}`);
    }
    const properties = resource.Properties ?? {};
    if (isIntrinsic(properties)) return;
    if (!isMap(properties)) return this.error(`${path}.Properties`, `expected a map, got ${describe(properties)}`);
    this.struct(properties, spec.Properties ?? {}, type, type, `${path}.Properties`);
  }

  // A map of properties against their specifications; owner is the resource type whose property types apply.
  struct(value, specs, owner, label, path) {
    for (const [key, v] of Object.entries(value)) {
      const spec = specs[key];
      if (!spec) {
        this.error(`${path}.${key}`, `${label} has no property ${key}${suggestion(key, Object.keys(specs))}`);
        continue;
      }
      ++this.properties;
      this.used.add(`${label}.${key}`);
      this.value(v, spec, owner, `${path}.${key}`);
    }
    for (const [key, spec] of Object.entries(specs))
      if (spec.Required && !(key in value)) this.error(`${path}.${key}`, `required by ${label}, missing`);
  }

  // One value against a property's specification: its shape, and recursively what it holds.
  value(v, spec, owner, path) {
    if (isMap(v) && 'Fn::If' in v && Object.keys(v).length === 1) {
      const args = v['Fn::If'];
      if (Array.isArray(args) && args.length === 3)
        for (const [i, branch] of [[1, args[1]], [2, args[2]]].filter(([, b]) => !isNoValue(b)))
          this.value(branch, spec, owner, `${path}(Fn::If[${i}])`);
      return;
    }
    if (isIntrinsic(v)) return; // resolved at deploy time
    if (spec.PrimitiveType) return this.primitive(v, spec.PrimitiveType, path);
    if (spec.Type === 'List') {
      if (!Array.isArray(v)) return this.error(path, `expected a list, got ${describe(v)}`);
      v.forEach((item, i) => this.item(item, spec, owner, `${path}[${i}]`));
      return;
    }
    if (spec.Type === 'Map') {
      if (!isMap(v)) return this.error(path, `expected a map, got ${describe(v)}`);
      for (const [k, item] of Object.entries(v)) this.item(item, spec, owner, `${path}.${k}`);
      return;
    }
    if (spec.Type) return this.named(v, spec.Type, owner, path);
    // The CDK's union types (Types, PrimitiveTypes): any shape.
  }

  item(v, spec, owner, path) {
    if (spec.PrimitiveItemType) return this.value(v, { PrimitiveType: spec.PrimitiveItemType }, owner, path);
    if (spec.ItemType) return this.value(v, { Type: spec.ItemType }, owner, path);
  }

  named(v, typeName, owner, path) {
    const type = this.propertyType(owner, typeName);
    if (!type) return; // a gap in the specification itself, not in the template
    if (!type.Properties) return this.value(v, type, owner, path); // an alias of another type
    if (!isMap(v)) return this.error(path, `expected a map (${typeName}), got ${describe(v)}`);
    this.struct(v, type.Properties, owner, `${owner}.${typeName}`, path);
  }

  primitive(v, primitiveType, path) {
    if (primitiveType === 'Json') {
      if (!isMap(v) && typeof v !== 'string') this.error(path, `expected a JSON object, got ${describe(v)}`);
    } else if (Array.isArray(v) || isMap(v) || v === null) {
      this.error(path, `expected a ${primitiveType}, got ${describe(v)}`);
    }
  }

  // Every name the template uses must exist: Ref, Fn::GetAtt, Fn::Sub variables, conditions, DependsOn.
  references() {
    const t = this.template;
    const parameters = new Set(Object.keys(isMap(t.Parameters) ? t.Parameters : {}));
    const resources = isMap(t.Resources) ? t.Resources : {};
    const conditions = new Set(Object.keys(isMap(t.Conditions) ? t.Conditions : {}));
    const mappings = new Set(Object.keys(isMap(t.Mappings) ? t.Mappings : {}));

    const ref = (name, path, locals = new Set()) => {
      if (typeof name !== 'string') return this.error(path, 'Ref needs a name');
      if (!(name in PSEUDO_PARAMETERS) && !parameters.has(name) && !(name in resources) && !locals.has(name))
        this.error(path, `Ref to ${name}, which is neither a parameter nor a resource` +
          suggestion(name, [...parameters, ...Object.keys(resources)]));
    };
    const getAtt = (resource, attribute, path) => {
      if (!(resource in resources))
        return this.error(path,
          `Fn::GetAtt of ${resource}, which is not a resource${suggestion(resource, Object.keys(resources))}`);
      const type = resources[resource]?.Type;
      const spec = SPEC.ResourceTypes[type];
      if (!spec || typeof attribute !== 'string') return; // custom or unknown type: reported elsewhere
      const attributes = Object.keys(spec.Attributes ?? {});
      if (!attributes.includes(attribute))
        this.error(path, `${type} has no attribute ${attribute}${suggestion(attribute, attributes)}`);
    };
    const sub = (text, path, locals) => {
      if (typeof text !== 'string') return;
      for (const [, variable] of text.matchAll(/\$\{([^}]*)\}/g)) {
        if (variable.startsWith('!')) continue; // ${!Literal}
        const name = variable.trim();
        if (locals.has(name) || name in PSEUDO_PARAMETERS || parameters.has(name)) continue;
        const dot = name.indexOf('.');
        if (dot > 0 && name.slice(0, dot) in resources) getAtt(name.slice(0, dot), name.slice(dot + 1), path);
        else this.error(path, `Fn::Sub variable \${${name}} is neither a parameter nor a resource` +
          suggestion(name, [...parameters, ...Object.keys(resources)]));
      }
    };
    const condition = (name, path, what) => {
      if (!conditions.has(name)) this.error(path, `${what} ${name}${suggestion(String(name), conditions)}`);
    };
    const walk = (v, path) => {
      if (Array.isArray(v)) return v.forEach((item, i) => walk(item, `${path}[${i}]`));
      if (!isMap(v)) return;
      if (isIntrinsic(v)) {
        const [fn, args] = Object.entries(v)[0];
        const list = (n) => Array.isArray(args) && args.length === n;
        if (fn === 'Ref') {
          ref(args, path);
        } else if (fn === 'Condition') {
          condition(args, path, 'unknown condition');
        } else if (fn === 'Fn::GetAtt') {
          if (!list(2)) this.error(path, 'Fn::GetAtt takes [Resource, Attribute]');
          else if (typeof args[0] === 'string') getAtt(args[0], args[1], path);
        } else if (fn === 'Fn::If') {
          if (!list(3)) this.error(path, 'Fn::If takes [Condition, IfTrue, IfFalse]');
          else condition(args[0], path, 'Fn::If on unknown condition');
        } else if (fn === 'Fn::Sub') {
          const here = `${path}.Fn::Sub`;
          if (typeof args === 'string') sub(args, here, new Set());
          else if (list(2) && isMap(args[1])) sub(args[0], here, new Set(Object.keys(args[1])));
          else this.error(here, 'Fn::Sub takes a string or [String, {Variable: Value}]');
        } else if (fn === 'Fn::FindInMap' && Array.isArray(args) && !mappings.has(args[0])) {
          this.error(path, `Fn::FindInMap of unknown mapping ${args[0]}`);
        }
        return walk(args, `${path}.${fn}`);
      }
      for (const [k, item] of Object.entries(v)) walk(item, `${path}.${k}`);
    };

    for (const [name, resource] of Object.entries(resources)) {
      if (!isMap(resource)) continue;
      const path = `Resources.${name}`;
      if (resource.Condition !== undefined) condition(resource.Condition, `${path}.Condition`, 'unknown condition');
      for (const dep of [].concat(resource.DependsOn ?? []))
        if (!(dep in resources))
          this.error(`${path}.DependsOn`, `${dep} is not a resource${suggestion(String(dep), Object.keys(resources))}`);
      for (const key of ['Properties', 'Metadata', 'CreationPolicy', 'UpdatePolicy'])
        if (resource[key] !== undefined) walk(resource[key], `${path}.${key}`);
    }
    if (isMap(t.Conditions)) for (const [name, c] of Object.entries(t.Conditions)) walk(c, `Conditions.${name}`);
    if (isMap(t.Outputs)) for (const [name, o] of Object.entries(t.Outputs)) {
      if (!isMap(o) || o.Value === undefined) this.error(`Outputs.${name}`, 'an output needs a Value');
      else walk(o, `Outputs.${name}`);
    }
  }
}

function checkSpec(file) {
  const check = new SpecCheck(loadTemplate(file)).run();
  for (const line of check.problems) console.error(line);
  if (check.problems.length > 0) {
    console.error(`check-spec: ${file}: ${check.problems.length} problem(s)`);
    process.exit(1);
  }
  console.log(`check-spec: ${check.resources} resources, ${check.properties} properties checked against the ` +
    `CloudFormation specification (cfnspec ${CFNSPEC_VERSION}, resource specification ` +
    `${SPEC.ResourceSpecificationVersion}): ok`);
}

// ---- cfn-lint with an up-to-date specification ----

// What cfn-lint's bundled specification lacks: whole types, and properties and attributes of the types it has.
function missingDefinitions(old) {
  const added = { ResourceTypes: {}, PropertyTypes: {} };
  const names = [];
  // cfn-lint knows no union types (the CDK's Types, PrimitiveTypes): it may take any JSON there.
  const plain = (p) => (p.Type || p.PrimitiveType || p.ItemType || p.PrimitiveItemType ? p
    : { ...p, PrimitiveType: 'Json' });
  for (const section of ['ResourceTypes', 'PropertyTypes']) {
    for (const [type, spec] of Object.entries(SPEC[section])) {
      const mine = old[section][type];
      if (!mine) {
        added[section][type] = spec.Properties
          ? { ...spec, Properties: Object.fromEntries(Object.entries(spec.Properties).map(([k, p]) => [k, plain(p)])) }
          : spec;
        names.push(type);
        continue;
      }
      const more = {};
      for (const [k, p] of Object.entries(spec.Properties ?? {}))
        if (!mine.Properties || !(k in mine.Properties)) {
          more.Properties = { ...more.Properties, [k]: plain(p) };
          names.push(`${type}.${k}`);
        }
      for (const [k, a] of Object.entries(spec.Attributes ?? {}))
        if (!mine.Attributes || !(k in mine.Attributes)) more.Attributes = { ...more.Attributes, [k]: a };
      if (Object.keys(more).length > 0) added[section][type] = more;
    }
  }
  return { added, names };
}

// cfn-lint keeps its state in module globals that one validation leaves dirty: one process per parameter set.
function cfnLint(file, parametersFile) {
  let parameterSets;
  try {
    parameterSets = JSON.parse(readFileSync(parametersFile, 'utf8'));
  } catch (e) {
    fatal(`${parametersFile}: ${e.message}`);
  }
  if (!isMap(parameterSets) || Object.keys(parameterSets).length === 0)
    fatal(`${parametersFile}: expected {"SET NAME": {"Parameter": "value", ...}, ...}`);
  let failed = false;
  for (const [setName, parameters] of Object.entries(parameterSets)) {
    const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--cfn-lint-set', file, setName,
      JSON.stringify(parameters)], { stdio: 'inherit' });
    if (child.status !== 0) failed = true;
  }
  // Say which of the template's properties cfn-lint checked only thanks to the additions.
  const awsData = require('cfn-lint/lib/awsData');
  const { names } = missingDefinitions(awsData.awsResources);
  const used = new SpecCheck(loadTemplate(file)).run().used;
  const newer = names.filter((n) => used.has(n)).sort();
  console.log(`cfn-lint: its specification ${awsData.awsResources.ResourceSpecificationVersion} was extended ` +
    `with ${names.length} definitions from cfnspec ${CFNSPEC_VERSION}; this template uses ${newer.length} of them` +
    `${newer.length ? `: ${newer.join(', ')}` : ''}`);
  if (failed) process.exit(1);
}

function cfnLintSet(file, setName, parametersJson) {
  const lintVersion = require('cfn-lint/package.json').version;
  const awsData = require('cfn-lint/lib/awsData');
  const resourcesSpec = require('cfn-lint/lib/resourcesSpec');
  const api = require('cfn-lint/lib/api');
  resourcesSpec.extendSpecification(missingDefinitions(awsData.awsResources).added);
  let result;
  try {
    result = api.validateFile(file, { parameters: JSON.parse(parametersJson), guessParameters: undefined });
  } catch (e) {
    console.error(`error: cfn-lint (${setName}): ${file}: ${e.message}`);
    process.exit(1);
  }
  const counts = ['crit', 'warn', 'info'].map((level) => `${result.errors[level].length} ${level}`).join(', ');
  for (const level of ['crit', 'warn', 'info'])
    for (const e of result.errors[level]) {
      const message = String(e.message).split('\n')[0].slice(0, 200);
      console.error(`${level === 'info' ? 'info' : 'error'}: cfn-lint (${setName}): ${e.resource}: ${message}`);
    }
  console.log(`cfn-lint ${lintVersion} (${setName} parameters): ${counts}`);
  if (!result.templateValid || result.errors.crit.length + result.errors.warn.length > 0) process.exit(1);
}

// ---- user data, rendered ----

function userData(resourceName, file) {
  const template = loadTemplate(file);
  const resource = template.Resources?.[resourceName];
  if (!resource) fatal(`${file}: no resource ${resourceName}`);
  let data = resource.Properties?.LaunchTemplateData?.UserData ?? resource.Properties?.UserData;
  if (isMap(data) && 'Fn::Base64' in data) data = data['Fn::Base64'];
  let text;
  let locals = {};
  if (isMap(data) && 'Fn::Sub' in data) {
    const sub = data['Fn::Sub'];
    [text, locals] = typeof sub === 'string' ? [sub, {}] : [sub[0], sub[1] ?? {}];
  } else if (typeof data === 'string') {
    text = data;
  } else {
    fatal(`${file}: ${resourceName}: user data is neither a string nor Fn::Base64 of Fn::Sub`);
  }
  const parameters = isMap(template.Parameters) ? template.Parameters : {};
  const rendered = text.replace(/\$\{([^}]*)\}/g, (_, name) => {
    if (name.startsWith('!')) return `\${${name.slice(1)}}`;
    if (name in PSEUDO_PARAMETERS) return PSEUDO_PARAMETERS[name];
    if (name in locals) return typeof locals[name] === 'string' ? locals[name] : `example-${name}`;
    const p = parameters[name];
    if (p && p.Default !== undefined && p.Default !== '') return String(p.Default);
    return `example-${name.replace(/[^A-Za-z0-9]/g, '-')}`;
  });
  process.stdout.write(rendered);
}

// ---- main ----

const args = process.argv.slice(2);
const usage = 'usage: check-spec.mjs TEMPLATE | --cfn-lint TEMPLATE PARAMETERS_JSON | --user-data RESOURCE TEMPLATE';
if (args[0] === '--cfn-lint' && args.length === 3) cfnLint(args[1], args[2]);
else if (args[0] === '--cfn-lint-set' && args.length === 4) cfnLintSet(args[1], args[2], args[3]);
else if (args[0] === '--user-data' && args.length === 3) userData(args[1], args[2]);
else if (args.length === 1 && !args[0].startsWith('-')) checkSpec(args[0]);
else fatal(usage);
