// The PromQL expression editor: CodeMirror 6 with the PromQL language,
// highlighting, and completion of functions, metric names, label names
// and values from this server's API.
import { EditorView, keymap, placeholder, drawSelection } from '@codemirror/view';
import { EditorState } from '@codemirror/state';
import { defaultKeymap, history, historyKeymap } from '@codemirror/commands';
import { autocompletion, closeBrackets, closeBracketsKeymap } from '@codemirror/autocomplete';
import { syntaxHighlighting, HighlightStyle, bracketMatching } from '@codemirror/language';
import { tags } from '@lezer/highlight';
import { PromQLExtension } from '@prometheus-io/codemirror-promql';
import { basePath } from './api';

const highlight = HighlightStyle.define([
  { tag: tags.number, color: '#09885a' },
  { tag: tags.string, color: '#a31515' },
  { tag: tags.keyword, color: '#008080', fontWeight: 'bold' },
  { tag: tags.function(tags.variableName), color: '#008080' },
  { tag: tags.labelName, color: '#800000' },
  { tag: tags.operator, color: '#777' },
  { tag: tags.modifier, color: '#008080', fontWeight: 'bold' },
  { tag: tags.paren, color: '#555' },
  { tag: tags.squareBracket, color: '#555' },
  { tag: tags.brace, color: '#555' },
  { tag: tags.invalid, color: 'red' },
  { tag: tags.comment, color: '#888', fontStyle: 'italic' },
]);

let promql: PromQLExtension | undefined;

function extension(): PromQLExtension {
  // One client for every editor on the page: its cache of metric names
  // and metadata is shared.
  promql ??= new PromQLExtension().setComplete({ remote: { url: basePath(), cache: { maxAge: 60_000 } } });
  return promql;
}

/** Creates an editor in parent; onRun is called on Enter (Shift-Enter: new line). */
export function newEditor(parent: HTMLElement, doc: string, onRun: () => void, onChange: () => void): EditorView {
  return new EditorView({
    parent,
    state: EditorState.create({
      doc,
      extensions: [
        history(),
        drawSelection(),
        closeBrackets(),
        bracketMatching(),
        autocompletion(),
        syntaxHighlighting(highlight),
        placeholder('Expression (press Shift+Enter for newlines)'),
        extension().asExtension(),
        keymap.of([
          { key: 'Enter', run: () => (onRun(), true) },
          ...closeBracketsKeymap,
          ...defaultKeymap,
          ...historyKeymap,
        ]),
        EditorView.lineWrapping,
        EditorView.updateListener.of((u) => {
          if (u.docChanged) onChange();
        }),
      ],
    }),
  });
}
